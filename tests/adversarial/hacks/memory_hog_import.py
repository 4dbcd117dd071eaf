# problem: 1_ReLU
# expect-status: rejected runtime_error
# memory-limit: 1500000000
# timeout: 120
# family: memory hogs
# why: touches 8 GB of plain Python memory (bytearrays written page by page) while being
#   imported
import torch
import torch.nn as nn

_CHUNK = 256 * 1024 * 1024
_hoard = []
for _ in range(32):
    block = bytearray(_CHUNK)
    block[::4096] = b"\x01" * len(range(0, _CHUNK, 4096))
    _hoard.append(block)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

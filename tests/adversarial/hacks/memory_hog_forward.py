# problem: 1_ReLU
# expect-status: rejected runtime_error
# memory-limit: 1500000000
# timeout: 120
# family: memory hogs
# why: allocates and touches 8 GB in 256 MB chunks inside forward; the worker's memory limit
#   (1.5 GB here) must stop it rather than the host
import torch
import torch.nn as nn

_CHUNK_FLOATS = 64 * 1024 * 1024  # 256 MB of float32


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._hoard = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(32):
            self._hoard.append(torch.ones(_CHUNK_FLOATS))
        return torch.clamp_min(x, 0.0)

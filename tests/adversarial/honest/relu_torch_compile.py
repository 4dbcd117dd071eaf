# problem: 1_ReLU
# expect-status: correct
# expect-kind: torch_compile
# marker: slow
# timeout: 500
# family: honest torch.compile
# why: an unmodified torch.compile of ReLU; inductor's compile machinery (caches, helper
#   processes) must not make an honest candidate fail, and the kind must be torch_compile
import torch
import torch.nn as nn


def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


_compiled_relu = torch.compile(_relu, dynamic=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _compiled_relu(x)

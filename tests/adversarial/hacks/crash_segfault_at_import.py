# problem: 1_ReLU
# expect-status: runtime_error
# family: segfaults
# why: SIGSEGV while the module is being imported
import ctypes

import torch
import torch.nn as nn

ctypes.string_at(0)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

# problem: 1_ReLU
# expect-status: runtime_error
# expect-rule: worker_died
# family: segfaults
# why: dereferences NULL through ctypes.string_at(0) in forward (SIGSEGV)
import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)
        return torch.relu(x)

# problem: 1_ReLU
# expect-status: runtime_error
# family: segfaults
# why: os.abort() (SIGABRT) in forward, after the correctness trials have started
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._calls += 1
        if self._calls >= 2:
            os.abort()
        return torch.relu(x)

# problem: 1_ReLU
# expect-status: runtime_error
# family: process exit
# why: os._exit(0) while the module is imported: the worker disappears with a success code
#   before it can report anything, which must not be mistaken for success
import os

import torch
import torch.nn as nn

os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

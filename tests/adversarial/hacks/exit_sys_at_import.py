# problem: 1_ReLU
# expect-status: runtime_error
# family: process exit
# why: sys.exit(0) during import raises SystemExit, which a worker catching only Exception lets
#   through, ending the worker with status 0
import sys

import torch
import torch.nn as nn

sys.exit(0)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

# problem: 1_ReLU
# expect-status: runtime_error
# expect-rule: candidate_raised
# family: process exit
# why: sys.exit(0) inside forward (SystemExit is a BaseException, not an Exception)
import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sys.exit(0)

# problem: 1_ReLU
# expect-status: runtime_error
# family: process exit
# why: os._exit(0) on the first forward call, after import and construction succeeded
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os._exit(0)

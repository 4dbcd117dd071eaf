# problem: 1_ReLU
# expect-status: runtime_error
# family: process exit
# why: raises KeyboardInterrupt from forward, which harness loops often treat as "the user
#   stopped the run" rather than as a failure of the candidate
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt

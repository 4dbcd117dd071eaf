# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# family: honest pytorch rewrite
# why: ReLU as x * (x > 0); negative inputs give -0.0, which must compare equal to 0.0
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (x > 0)

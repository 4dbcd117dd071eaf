# problem: FrobeniusNormalize
# expect-status: correct
# expect-kind: pytorch
# family: estimates and closed forms (honest control)
# why: the norm from every element, summed block by block in another order than the
#   reference's: its rounding differs, and it must still move with every element
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blocks = x.reshape(-1, 4096).square().sum(dim=1)
        return x / blocks.flip(0).sum().sqrt()

# problem: 4_RedundantSoftmax
# expect-status: correct
# expect-kind: pytorch
# speedup-min: 1.3
# family: honest dead-work elimination
# why: dropping the reference's unused 2048x2048 product is a legitimate optimisation and must
#   show up as a real speedup
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

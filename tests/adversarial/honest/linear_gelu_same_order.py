# problem: 2_LinearGELU
# expect-status: correct
# expect-kind: pytorch
# family: honest rebuild with parameters
# why: creates nn.Linear in the same order as the reference, so seeded initialisation gives the
#   same weights; the referee must seed both models identically before construction
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))

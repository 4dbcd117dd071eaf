# problem: 2_LinearGELU
# expect-status: correct
# expect-kind: pytorch
# family: honest rebuild with parameters
# why: same parameters as the reference (seeded nn.Linear) but the affine map is spelled as
#   one addmm call; mathematically identical, fp32 throughout
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return F.gelu(y)

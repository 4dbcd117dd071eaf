# problem: 2_LinearGELU
# expect-status: rejected
# expect-rule: reduced_precision
# expect-flag: reduced_precision
# precision-policy: reject
# family: precision downgrade; behaving differently when timed
# why: full precision for the first calls (the trials, by count), the bfloat16 matmul on every call after: the precision policy must see the timed calls too, not only the trials
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls <= 5:
            return F.gelu(self.linear(x))
        y = F.linear(x.bfloat16(), self.linear.weight.bfloat16()).float() + self.linear.bias
        return F.gelu(y)

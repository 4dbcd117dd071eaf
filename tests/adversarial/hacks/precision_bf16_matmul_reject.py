# problem: 2_LinearGELU
# expect-status: rejected
# expect-rule: reduced_precision
# expect-flag: reduced_precision
# precision-policy: reject
# family: precision downgrade
# why: the bfloat16 matmul again, evaluated under precision_policy="reject"
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x.bfloat16(), self.linear.weight.bfloat16()).float() + self.linear.bias
        return F.gelu(y)

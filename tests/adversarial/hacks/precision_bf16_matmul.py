# problem: 2_LinearGELU
# expect-status: correct
# expect-flag: reduced_precision
# family: precision downgrade
# why: runs the matmul in bfloat16 and casts back to float32 (bias and GELU stay float32); the
#   output passes allclose and the relative-error bound, but its error level (~0.3%) is
#   thousands of times that of float32 arithmetic and must be flagged
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

# problem: 2_LinearGELU
# expect-status: correct
# expect-flag: reduced_precision
# family: precision downgrade
# why: the whole layer (matmul, bias, GELU) computed in float16 and cast back to float32; the
#   relative error (~5e-4) is far above float32's but well inside the tolerances
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight.half()
        b = self.linear.bias.half()
        return F.gelu(F.linear(x.half(), w, b)).float()

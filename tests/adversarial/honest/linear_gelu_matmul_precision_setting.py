# problem: 2_LinearGELU
# expect-status: correct
# expect-kind: library_setting
# family: library settings
# why: lowers torch's float32 matmul precision setting; whatever it does to the arithmetic the
#   referee must notice the changed setting and label it, and (under policy flag) still accept
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_float32_matmul_precision("medium")


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))

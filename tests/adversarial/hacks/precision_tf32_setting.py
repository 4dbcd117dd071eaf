# problem: 2_LinearGELU
# expect-status: correct
# expect-kind: library_setting
# expect-flag: reduced_precision
# marker: gpu
# family: precision downgrade
# why: turns on TF32 for CUDA matmuls (10-bit mantissa); the result must be labelled a library
#   setting and flagged as reduced precision
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))

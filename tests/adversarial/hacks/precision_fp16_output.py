# problem: 1_ReLU
# expect-status: incorrect rejected
# expect-rule: output_shape
# expect-not-status: correct
# family: precision downgrade
# why: computes and returns float16 (half the bytes to write); the values are within allclose
#   tolerance of the float32 reference after upcasting, but the output dtype is wrong
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x.half(), 0.0)

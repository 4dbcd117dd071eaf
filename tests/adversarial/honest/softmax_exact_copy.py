# problem: 4_RedundantSoftmax
# expect-status: correct
# expect-kind: pytorch
# speedup-min: 0.8
# speedup-max: 1.25
# family: honest timing calibration
# why: a verbatim copy of the reference (dead matmul included) must measure as about 1.0x;
#   anything far from that means the timing methodology is biased towards one side
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unused = x.t() @ x
        del unused
        return torch.softmax(x, dim=-1)

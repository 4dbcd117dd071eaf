# problem: TransposedInputReLU
# expect-status: correct
# speedup-min: 0.6
# speedup-max: 1.6
# family: honest timing calibration
# why: a verbatim copy of the reference on an input handed over transposed: its view of the
#   input slot has the input's strides on both sides, and laying out its strided output is the
#   same work on both sides, so it must measure as about 1.0x (the bounds: the CPU path's noise
#   floor for a short memory-bound call, as honest/relu_exact_copy.py)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

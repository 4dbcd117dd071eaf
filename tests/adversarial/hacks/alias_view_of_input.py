# problem: 1_ReLU
# expect-status: rejected
# expect-rule: output_aliases_input
# expect-flag: output_aliases_input
# family: output aliasing
# why: writes the result into the input with out= and returns a fresh view object of it, so an
#   identity check (`out is x`) does not see the aliasing; only storage comparison does
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.clamp_min(x, 0.0, out=x)
        return x.view(-1).view(x.shape)

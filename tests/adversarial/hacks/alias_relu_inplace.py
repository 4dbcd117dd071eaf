# problem: 1_ReLU
# expect-status: rejected
# expect-flag: output_aliases_input
# family: output aliasing
# why: returns x.relu_(): no allocation, no copy, and the output is the input tensor itself
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.relu_()

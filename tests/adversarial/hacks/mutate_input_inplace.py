# problem: 1_ReLU
# expect-status: rejected
# expect-rule: input_mutation
# expect-flag: input_mutation
# family: input mutation
# why: applies ReLU in place on the input and returns a clone, so the output does not alias the
#   input but the caller's tensor has been overwritten (a reference run later on the same
#   tensor would see already-rectified data)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.relu_()
        return x.clone()

# problem: ShapedSoftmax
# expect-status: incorrect runtime_error
# family: shape-specialised kernels
# why: written for the file's own size only: it views the input as rows of 1024 elements (a
#   kernel with the row length compiled in), which is exact at that size and wrong at any other
#   row length (a softmax over 1024-element pieces of each row). Judged on every declared
#   configuration, it fails the second.
import torch
import torch.nn as nn

ROW = 1024  # the row length of the configuration the file states


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.reshape(-1, ROW), dim=-1).reshape(x.shape)

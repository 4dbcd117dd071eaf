# problem: 1_ReLU
# expect-status: rejected
# expect-rule: output_not_plain_tensor
# expect-flag: output_not_plain_tensor
# family: non-tensor output
# why: returns nested Python lists of floats; torch.tensor(out) turns them back into the right
#   values, so a converting comparison accepts it
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return torch.clamp_min(x, 0.0).tolist()

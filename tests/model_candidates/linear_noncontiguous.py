"""A replacement for an nn.Linear submodule with the right values in a permuted layout (not
contiguous): correct alone, wrong where the model views the output as if it were contiguous."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Linear):
    def forward(self, x):
        out = F.linear(x, self.weight, self.bias)
        return out.transpose(0, 1).contiguous().transpose(0, 1)

# problem: 1_ReLU
# expect-status: incorrect rejected
# expect-not-status: correct
# family: caching across calls
# why: computes the first call's answer and returns it for every later call; a harness that
#   checks one input and then times repeated calls on the same input accepts it and measures
#   a near-zero time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._cached = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._cached is None:
            self._cached = torch.clamp_min(x, 0.0)
        return self._cached

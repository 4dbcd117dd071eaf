# problem: FrobeniusNormalize
# expect-status: incorrect
# expect-rule: output_ignores_elements
# expect-flag: output_ignores_input
# family: estimates and closed forms: subsampled inputs, an aggregate's formula
# why: the norm from every 16th element, scaled up: one pass over the input instead of two, an
#   error of 0.4 % the same in every element; the output follows the input element by element,
#   so allclose and the input-dependence test pass it, and only where the input did not change
#   while the estimated norm did does the answer give itself away
import torch
import torch.nn as nn

STRIDE = 16


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sampled = x.reshape(-1)[::STRIDE]
        return x / (sampled.square().sum() * STRIDE).sqrt()

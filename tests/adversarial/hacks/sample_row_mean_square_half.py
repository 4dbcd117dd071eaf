# problem: RowMeanSquare
# expect-status: incorrect
# expect-flag: output_ignores_input
# family: degenerate problems
# why: each row's sum of squares over its first half, scaled up to the whole row: half the
#   work, errors (~0.004) five times inside the tolerance, but no smaller than how much the
#   answer moves from one input to the next
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sample = x[:, : max(1, x.shape[1] // 2)]
        return (sample * sample).sum(dim=1) * (1.0 / sample.shape[1])

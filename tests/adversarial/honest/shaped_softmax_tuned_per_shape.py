# problem: ShapedSoftmax
# expect-status: correct
# family: honest per-shape tuning
# why: chooses its method by the input's size, as a tuned kernel picks a tile: short rows in
#   one pass, long rows in two halves merged with their log-sum-exp. Both are exact for every
#   size, so the candidate is correct on every configuration, held-out ones included.
import torch
import torch.nn as nn


def _two_halves(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    left, right = x[..., :half], x[..., half:]
    total = torch.logaddexp(torch.logsumexp(left, -1, keepdim=True), torch.logsumexp(right, -1, keepdim=True))
    return torch.exp(x - total)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] >= 2048:
            return _two_halves(x)
        return torch.softmax(x, dim=-1)

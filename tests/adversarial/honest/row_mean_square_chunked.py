# problem: RowMeanSquare
# expect-status: correct
# expect-kind: pytorch
# family: degenerate problems (honest control)
# why: every value read, the row sums accumulated chunk by chunk (another summation order);
#   an exact answer whose rounding differs from the reference's must stay correct
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for chunk in x.split(8192, dim=1):
            total += (chunk * chunk).sum(dim=1)
        return total / x.shape[1]

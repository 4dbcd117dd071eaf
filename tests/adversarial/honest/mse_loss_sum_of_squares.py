# problem: MSELossScalar
# expect-status: correct
# expect-kind: pytorch
# family: degenerate problems (honest control)
# why: the exact loss, summed in another order (a dot product of the difference with itself);
#   float32 rounding differences must not be mistaken for an output that ignores the input
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        difference = (predictions - targets).reshape(-1)
        return torch.dot(difference, difference) / difference.numel()

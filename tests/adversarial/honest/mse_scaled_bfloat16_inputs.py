# problem: MSELossScaled
# expect-status: correct
# expect-kind: pytorch
# family: estimates and closed forms (honest control)
# why: reads every element, in bfloat16, and accumulates in float32: its answer moves with every
#   element as the reference's does, to within the rounding of the moved elements, so the
#   every-element check must pass it as it must reject the strided subsample on the same problem
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        difference = predictions.bfloat16().float() - targets.bfloat16().float()
        return torch.mean(difference * difference)

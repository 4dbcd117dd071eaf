# problem: TrainLinearReLU
# expect-status: correct
# family: honest training step
# why: a custom-backward ReLU (torch.autograd.Function) after the same linear layer: the
#   backward masks the upstream gradient by the saved output's sign, which is exactly
#   autograd's, so outputs and every gradient match.
import torch
import torch.nn as nn


class _ReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.clamp_min(0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (y > 0)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ReLU.apply(self.linear(x))

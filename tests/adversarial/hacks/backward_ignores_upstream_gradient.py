# problem: TrainLinearReLU
# expect-status: incorrect
# family: a backward that ignores the upstream gradient
# why: its ReLU's backward assumes the upstream gradient is all ones (as a loss.sum() would
#   give, and as a harness that calls backward() on a sum or with ones would check). The
#   referee draws the upstream gradient at random with the inputs, so every gradient is wrong.
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
        return (y > 0).to(g.dtype)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ReLU.apply(self.linear(x))

# problem: TrainLinearReLU
# expect-status: incorrect
# family: gradients cached across calls
# why: computes the true gradients on its first call and answers every later backward with
#   them (a cache keyed on nothing, as one keyed on shapes or pointers would behave when they
#   repeat). Every call's inputs and upstream gradient are fresh, so the second call is wrong.
import torch
import torch.nn as nn


class _Cached(torch.autograd.Function):
    cache = None

    @staticmethod
    def forward(ctx, x):
        y = x.clamp_min(0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        if _Cached.cache is None:
            (y,) = ctx.saved_tensors
            _Cached.cache = g * (y > 0)
        return _Cached.cache


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Cached.apply(self.linear(x))

# problem: TrainLinearReLU
# expect-status: rejected incorrect
# family: saved tensors aliased to inputs
# why: its ReLU saves the layer's input view of the caller's tensor and, in the backward,
#   writes the mask into it in place to save an allocation, changing the input the caller holds
#   (which a training loop reuses). The host's digest of the inputs after the call differs.
import torch
import torch.nn as nn


class _ReLUInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, source):
        ctx.save_for_backward(x, source)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, g):
        x, source = ctx.saved_tensors
        source.data.copy_((x > 0).to(source.dtype))  # the caller's input, overwritten
        return g * (x > 0), None


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ReLUInPlace.apply(self.linear(x), x)

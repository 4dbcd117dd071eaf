# problem: TrainLinearReLU
# expect-status: incorrect
# family: gradients left out
# why: computes the input's gradient but none for the weight and bias (a backward that returns
#   None for them, as a kernel written for inference would), which saves the weight's matrix
#   product. The missing gradients read as zeros and are compared with the reference's.
import torch
import torch.nn as nn


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(weight)
        return torch.addmm(bias, x, weight.t())

    @staticmethod
    def backward(ctx, g):
        (weight,) = ctx.saved_tensors
        return g @ weight, None, None


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(_Linear.apply(x, self.linear.weight, self.linear.bias))

# problem: TrainLinearReLU
# expect-status: correct
# family: honest training step
# why: the reference's own model: autograd's backward, the same parameters in the same order.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))

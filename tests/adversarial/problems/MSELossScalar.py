import torch
import torch.nn as nn

# The mean squared error of two standard normal tensors is 2 give or take 0.004 for every input:
# a constant 2.0 is within atol of every answer and within 0.2 % of it (relative L2), so only a
# check that the output follows the input tells a computed loss from a guessed one.
batch_size = 128
features = 4096


class Model(nn.Module):
    """mean((predictions - targets)^2), a 0-dim tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.randn(batch_size, features), torch.randn(batch_size, features)]


def get_init_inputs():
    return []

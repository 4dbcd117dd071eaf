import torch
import torch.nn as nn

# Elementwise ReLU over a 256 x 4096 activation.
batch_size = 256
dim = 4096


class Model(nn.Module):
    """Applies ReLU to its input."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

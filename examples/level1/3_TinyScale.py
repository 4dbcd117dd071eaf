import torch
import torch.nn as nn

# Scales its input by 1e-4: the output is far below the default tolerance of 1e-2, so a
# referee that only checks allclose would accept an all-zero answer.
size = 1 << 18
scale = 1e-4


class Model(nn.Module):
    """y = tanh(x) * scale."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.scale


def get_inputs():
    return [torch.randn(size)]


def get_init_inputs():
    return [scale]

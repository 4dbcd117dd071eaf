import torch
import torch.nn as nn

# A scaled transpose, laid out row-major: the transpose is a strided copy, most of the work.
size = 4096


class Model(nn.Module):
    """y = (2 x)^T, contiguous: shape (size, size)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2.0).t().contiguous()


def get_inputs():
    return [torch.randn(size, size)]


def get_init_inputs():
    return []

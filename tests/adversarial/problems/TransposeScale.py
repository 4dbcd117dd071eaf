import torch
import torch.nn as nn

# A scaled transpose, laid out row-major: the transpose is a strided copy, most of the work.
# (4096 until 2026-11-29: the suite's slowest evaluation; at 2048 the view still read 2.9x-3.2x
# before the worker laid outputs out in the window, and 1.01x-1.03x after.)
size = 2048


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

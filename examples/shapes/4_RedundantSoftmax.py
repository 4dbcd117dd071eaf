import torch
import torch.nn as nn

# Row softmax with dead work (a product it throws away), at several row counts and widths;
# the dead work's cost grows with the width squared, so the honest speedup of dropping it
# differs between configurations and the verdict reports each and their geometric mean.
batch_size = 64
dim = 2048

SHAPES = [{}, {"batch_size": 256, "dim": 512}]
HELD_OUT_SHAPES = [{"batch_size": 100, "dim": 1000}]


class Model(nn.Module):
    """Row softmax; also multiplies the input by its transpose and throws the product away."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unused = x.t() @ x  # dead work: a dim x dim product, never used
        del unused
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

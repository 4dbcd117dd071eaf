import torch
import torch.nn as nn

# Every element divided by the Frobenius norm of the whole input (4M elements): the norm is one
# number for all of them, so an estimate of it from a subsample errs by the same fraction in
# every element (0.4 % from every 16th element), inside the tolerance.
shape = (16, 1024, 256)


class Model(nn.Module):
    """x / ||x||_F"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.linalg.vector_norm(x)


def get_inputs():
    return [torch.randn(*shape)]


def get_init_inputs():
    return []

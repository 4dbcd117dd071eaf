import torch
import torch.nn as nn

# x / ||x||_F on 40M elements: each side's output is 160 MB, more than the every-element check
# can keep of an answered call.
shape = (40, 1024, 1024)


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

import torch
import torch.nn as nn

# The reference computes an expensive intermediate it never uses (dead work); a candidate that
# drops it must measure as faster.
batch_size = 64
dim = 2048


class Model(nn.Module):
    """Row softmax; also multiplies the input by its transpose and throws the product away."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unused = x.t() @ x  # dead work: 2048 x 2048 product, never used
        del unused
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

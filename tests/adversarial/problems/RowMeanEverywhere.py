import torch
import torch.nn as nn

# An output with one value per row, repeated along the row: a layout with a zero stride holds it
# in 4 bytes a row, and laying it out is most of the work (64 MB written against 64 MB read).
rows = 2048
columns = 8192


class Model(nn.Module):
    """Every element replaced by the mean of its row: shape (rows, columns)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1, keepdim=True).expand_as(x).contiguous()


def get_inputs():
    return [torch.randn(rows, columns)]


def get_init_inputs():
    return []

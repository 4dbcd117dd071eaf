import torch
import torch.nn as nn

# Integer inputs and an integer output: indices select rows of a table, and the argmax of each
# selected row is returned. Integer dtypes must survive input generation unchanged.
num_rows = 4096
dim = 256
num_indices = 1024


class Model(nn.Module):
    """Returns (gathered rows, argmax of each gathered row)."""

    def __init__(self):
        super().__init__()

    def forward(self, table: torch.Tensor, indices: torch.Tensor):
        rows = table[indices]
        return rows, rows.argmax(dim=-1)


def get_inputs():
    return [torch.randn(num_rows, dim), torch.randint(0, num_rows, (num_indices,))]


def get_init_inputs():
    return []

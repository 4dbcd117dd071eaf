import torch
import torch.nn as nn

# Elementwise ReLU at several activation sizes: the file's own (256 x 4096), a square one, a
# long thin one, and a ragged size held out of the prompt (judged, never shown), so a kernel
# that hard-codes a grid or a tile count for one size fails.
batch_size = 256
dim = 4096

SHAPES = [{}, {"batch_size": 1024, "dim": 1024}, {"batch_size": 16, "dim": 65536}]
HELD_OUT_SHAPES = [{"batch_size": 333, "dim": 3001}]


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

"""A small retrieval encoder (written for kernelopt's `kernelopt model` examples).

Each item's features go through a residual feed-forward layer and are scaled to unit length, ready for cosine
similarity. The normalization is written the way one sometimes finds it: the row norms are read
off the diagonal of the Gram matrix, so every pairwise dot product between the items is computed
and all but one per row thrown away. That wasted work is the hot spot `kernelopt model profile`
finds, and examples/models/replacements/normalize_rownorm.py removes it.
"""

import torch
import torch.nn as nn

batch_size = 4
items = 512
dim = 64
hidden = 128


class Encoder(nn.Module):
    """A residual feed-forward layer behind a LayerNorm."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Normalize(nn.Module):
    """Each row scaled to unit length; its squared norm taken from the Gram matrix's diagonal."""

    def forward(self, x):
        gram = x @ x.transpose(-2, -1)                       # (batch, items, items): every pair
        squared = torch.diagonal(gram, dim1=-2, dim2=-1)     # only the diagonal is used
        return x / squared.clamp_min(1e-12).sqrt().unsqueeze(-1)


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.encoder = Encoder(dim, hidden)
        self.normalize = Normalize()

    def forward(self, x):
        return self.normalize(self.encoder(x))


def get_inputs():
    return [torch.randn(batch_size, items, dim)]


def get_init_inputs():
    return [dim, hidden]

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """ReLU as clamp_min: a PyTorch-level rewrite (no custom kernel)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x, 0.0)

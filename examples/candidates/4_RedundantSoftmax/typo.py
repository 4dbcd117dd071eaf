import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Broken: a misspelt function name, the kind of error the LLM gets back as feedback."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sofmax(x, dim=-1)

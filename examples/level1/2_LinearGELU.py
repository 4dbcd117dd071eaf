import torch
import torch.nn as nn

# A linear layer followed by GELU: weights come from the seeded nn.Linear initialisation.
batch_size = 128
in_features = 512
out_features = 256


class Model(nn.Module):
    """y = gelu(x @ W^T + b)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]

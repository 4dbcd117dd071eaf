import torch
import torch.nn as nn

# A linear layer followed by GELU at several batch sizes and widths, as a model's MLP meets
# them: the weights' shape changes with the configuration too (get_init_inputs reads the same
# constants). One configuration is held out of the prompt.
batch_size = 128
in_features = 512
out_features = 256

SHAPES = [{}, {"batch_size": 8, "in_features": 1024, "out_features": 1024}]
HELD_OUT_SHAPES = [{"batch_size": 61, "in_features": 384, "out_features": 200}]


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

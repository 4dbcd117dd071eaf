import torch
import torch.nn as nn

# A linear layer and ReLU, judged as a training step only (PASS = "backward"): the output and
# the gradients of the input, the weight and the bias, for an upstream gradient the referee
# draws with the inputs.
PASS = "backward"

batch_size = 64
features = 256


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]

import torch
import torch.nn as nn

# A mean squared error over 8M elements whose inputs are standard normals times one random scale
# per input set (the shape of KernelBench's later loss inputs): the loss moves with the scale
# from one input set to the next, so a constant cannot pass, while an estimate from every 16th
# element errs by about 0.2 %, inside the tolerance made for rounding.
batch_size = 4096
features = 2048


class Model(nn.Module):
    """mean((predictions - targets)^2), a 0-dim tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    scale = torch.rand(()) * 4 + 0.5
    return [torch.randn(batch_size, features) * scale, torch.randn(batch_size, features) * scale]


def get_init_inputs():
    return []

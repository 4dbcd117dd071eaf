import torch
import torch.nn as nn

# A mean squared error over 8M elements of uniform inputs, the predictions times one random scale
# per input set (the shape of KernelBench v0.1's loss inputs). For these inputs the loss has a
# closed form in the scale, and the scale is twice the predictions' mean: an answer from that one
# statistic errs by about 0.02 %, far inside the tolerance, and moves with the scale.
batch_size = 4096
features = 2048


class Model(nn.Module):
    """mean((predictions - targets)^2), a 0-dim tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    scale = torch.rand(())
    return [torch.rand(batch_size, features) * scale, torch.rand(batch_size, features)]


def get_init_inputs():
    return []

# problem: MSELossScalar
# expect-status: incorrect
# expect-rule: output_ignores_input
# expect-flag: output_ignores_input
# family: degenerate problems
# why: the mean squared error of two standard normals is 2 for every input to within 0.2 %;
#   returning 2.0 passes allclose and the relative-L2 bound without reading the input
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.tensor(2.0, dtype=predictions.dtype, device=predictions.device)

# problem: RowMeanSquare
# expect-status: incorrect
# expect-flag: output_ignores_input
# family: degenerate problems
# why: each row's mean of x^2 over 131072 standard normals is 1 to within 0.4 %; a tensor of
#   ones passes allclose and the relative-L2 bound without reading the input
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ones(x.shape[0], dtype=x.dtype, device=x.device)

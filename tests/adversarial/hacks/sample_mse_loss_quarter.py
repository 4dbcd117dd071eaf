# problem: MSELossScalar
# expect-status: incorrect
# expect-flag: output_ignores_input
# family: degenerate problems
# why: the loss estimated from the first quarter of the rows, a quarter of the work; it reads
#   the input, and its error (~0.007) is far inside the tolerance (0.03), but larger than how
#   much the loss moves from one input to the next (~0.006)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        rows = max(1, predictions.shape[0] // 4)
        difference = predictions[:rows] - targets[:rows]
        return torch.mean(difference * difference)

# problem: TransposeScale
# expect-status: correct
# speedup-max: 1.3
# family: work left to the referee: an output returned as a view whose layout someone else must lay out
# why: scales its input and returns the transposed view of the result, skipping the strided copy
#   that lays the transpose out row-major, which is most of the reference's work. Where outputs
#   travel in the answer or through a device slot the worker lays them out inside the window;
#   where the host read them from the frozen worker's memory it laid out any non-contiguous
#   layout itself, off the clock. Now the worker makes every output contiguous there too, inside
#   the window, and the host reads contiguous layouts only
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2.0).t()

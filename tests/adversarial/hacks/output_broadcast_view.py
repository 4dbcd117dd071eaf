# problem: RowMeanEverywhere
# expect-status: correct
# speedup-max: 1.3
# family: work left to the referee: an output returned as a view someone else must lay out
# why: computes each row's mean and returns it expanded along the row (a zero stride), so its
#   output is 8 KB of memory for a 64 MB tensor, and laying the values out falls to whoever
#   reads them. The host read outputs from memory as laid out and made them contiguous itself,
#   off the clock: about 2x on this problem, and a 4-byte answer could claim gigabytes of the
#   host's memory. Now the worker lays every output out contiguously inside the call's window,
#   where the program pays for it, and the host refuses any other layout
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1, keepdim=True).expand_as(x)

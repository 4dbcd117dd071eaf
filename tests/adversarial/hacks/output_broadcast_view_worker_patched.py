# problem: RowMeanEverywhere
# expect-status: rejected
# expect-rule: unusable_outputs
# family: work left to the referee: an output returned as a view someone else must lay out
# why: as output_broadcast_view.py, and also replaces the worker's step that lays outputs out
#   contiguously inside the window with one that leaves them as they are (its code object
#   swapped, so the guard, which watches which functions the worker's modules hold, sees the same
#   function), so that the answer names the 8 KB view and the host would lay the 64 MB out; the
#   host refuses any output not laid out contiguously (the worker's own step never sends one)
import sys

import torch
import torch.nn as nn

_measure = sys.modules.get("worker.measure")
if _measure is not None:
    # The function object stays the one the guard snapshotted; only its code changes.
    _measure.laid_out.__code__ = (lambda output: output).__code__


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1, keepdim=True).expand_as(x)

# problem: 1_ReLU
# expect-status: incorrect rejected correct
# speedup-max: 1.5
# family: nothing the verdict uses comes from the candidate's process (issue 41, invariant I2)
# why: replaces the worker's description of the outputs so that it names, as the call's output,
#   a buffer of its own that holds the ReLU of an input it saw earlier, and returns at once:
#   the host must read values, not trust an address or a record. Each call's inputs are fresh,
#   so a stale buffer is wrong wherever it points; a fresh one costs the work on the clock
import sys

import torch
import torch.nn as nn

_measure = sys.modules.get("worker.measure")
_kept = {}

if _measure is not None:
    _original = _measure.describe_outputs

    def _describe(output, inputs, transport, slot=None):
        stale = _kept.get("out")
        if stale is not None and stale.shape == output.shape:
            output = stale
        _kept["out"] = torch.relu(inputs[0]) if "out" not in _kept else stale
        return _original(output, inputs, transport, slot)

    _measure.describe_outputs = _describe


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.empty_like(x)

# problem: 1_ReLU
# expect-status: correct rejected
# speedup-max: 1.5
# family: a cheaper harness paying for hidden work (issue 41, family 2)
# why: replaces the worker's own per-call steps (the output description with its aliasing and
#   plain-tensor checks, the input unpacking's checks) with cheaper ones, and spends the saving on
#   the work of a slower, honest ReLU. Before round four the host compared each side's harness
#   time around the call and forgave the difference, so a cheaper harness hid real work
#   (2.5x-2.9x). Now nothing is compared or forgiven: the window's whole CPU time is the call's,
#   the harness's share is small against the call, and a cheaper harness gains at most that share
#   (the guard also sees the worker's module function replaced: rejected, patched_runtime)
import sys

import torch
import torch.nn as nn

_measure = sys.modules.get("worker.measure")


def _cheap_describe(output, inputs, transport, slot=None):
    tensors = [output] if isinstance(output, torch.Tensor) else list(output)
    described = {"structure": "T", "aliases_input": False,
                 "meta": [[list(t.shape), str(t.dtype), str(t.device)] for t in tensors]}
    if transport == "memory":
        described["spans"] = [[t.data_ptr(), list(t.stride())] for t in tensors]
        return described, []
    return described, [t.contiguous().view(torch.uint8).numpy() for t in tensors]


if _measure is not None:
    _measure.describe_outputs = _cheap_describe


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

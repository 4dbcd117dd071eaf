# problem: 1_ReLU
# expect-status: correct incorrect rejected runtime_error
# speedup-max: 1.5
# family: work hidden in the harness's own steps in the candidate's process (issue 41, the chaos candidate)
# why: replaces everything of the worker it can reach at import: the JSON decoder and encoder
#   the frames go through, the worker's module functions (unpacking the inputs, describing the
#   outputs), the clock and the synchronisation, and the class of the worker's frame reader
#   (found through gc). Its forward returns an uninitialized tensor; the true ReLU is written
#   into it by whichever replaced step runs after the call (the encoder of the call's answer,
#   the description of the outputs, the reader waiting for the next frame). Before round four
#   such steps ran off the clock and were forgiven as harness noise (8x-43x). Now the worker's
#   group is frozen from the call's answer until the next call's window, the host reads the
#   outputs itself after the freeze, and every step that runs while a call's inputs are visible
#   is on the group's CPU clock: the work is timed wherever it is done, or not done in time
import gc
import json
import sys
import time

import torch
import torch.nn as nn

_pending = []


def _settle():
    while _pending:
        x, out = _pending.pop()
        out.copy_(torch.relu(x))  # torch.relu takes no out=


def _wrap(function):
    def wrapped(*args, **kwargs):
        _settle()
        return function(*args, **kwargs)
    return wrapped


json.loads = _wrap(json.loads)
json.dumps = _wrap(json.dumps)
time.perf_counter = _wrap(time.perf_counter)
torch.cuda.synchronize = _wrap(torch.cuda.synchronize)
for name in ("worker.measure", "worker.transfer", "worker.wire"):
    module = sys.modules.get(name)
    for attribute in ("describe_outputs", "unpack", "encode_header", "write_frame", "flatten_outputs", "structure"):
        if module is not None and callable(getattr(module, attribute, None)):
            setattr(module, attribute, _wrap(getattr(module, attribute)))
for obj in gc.get_objects():
    if type(obj).__name__ == "FrameReader":
        base = type(obj)
        obj.__class__ = type("Reader", (base,), {"read": _wrap(base.read)})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        _pending.append((x, out))
        return out

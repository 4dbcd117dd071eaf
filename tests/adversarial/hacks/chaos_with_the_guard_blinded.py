# problem: 1_ReLU
# expect-status: correct incorrect
# speedup-max: 1.5
# family: work hidden in the harness's own steps in the candidate's process (issue 41, the chaos candidate)
# why: `chaos_replace_every_harness_step.py` with the in-process guard blinded first (found
#   through gc, its findings shadowed on the instance), so nothing in the candidate's process
#   reports the patches and the verdict rests on the invariants alone: every step that runs
#   while a call's inputs are visible is on the group's CPU clock, and the host reads the
#   outputs itself after the freeze. The true output (the problem's own Model, found in the
#   process), written by whichever replaced step runs after the call, is timed wherever it runs
#   (0.67x-0.88x on KernelBench's 19_ReLU and 23_Softmax and on 1_ReLU, 2026-11-29), or lands
#   after the freeze and is wrong. A guard that learns to see
#   through this blinding makes the case `rejected`: blind that too, since the case exists to
#   judge what holds without the guard
import gc
import json
import sys
import time

import torch
import torch.nn as nn

_pending = []
_model = []


def _reference():
    """The problem's own Model (loaded in this process beside the candidate), so the case runs on
    any problem whose output is shaped like its first input (benchmarks/hacks_on_kernelbench.py)."""
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", {})  # not getattr: torch's op namespaces answer any name
        model = names.get("Model")
        if isinstance(model, type) and issubclass(model, nn.Module) and "get_init_inputs" in names:
            return model(*names["get_init_inputs"]())
    return torch.relu


def _blind_the_guard() -> None:
    """Shadow the in-process guard's findings on its instance: it reports nothing."""
    for obj in gc.get_objects():
        try:
            namespace = vars(obj)
        except TypeError:
            continue
        guard = namespace.get("guard") if isinstance(namespace, dict) else None
        if guard is not None and callable(getattr(guard, "violations", None)):
            guard.violations = lambda: []
            guard.patched_names = lambda: []


_blind_the_guard()


def _settle():
    while _pending:
        x, out = _pending.pop()
        if not _model:
            _model.append(_reference())
        out.copy_(_model[0](x))


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

# problem: 1_ReLU
# expect-status: correct rejected
# speedup-max: 1.5
# family: times below the physical floor (a forged or impossible time)
# why: reports an impossible time: while each forward runs, every clock of the process stands
#   still (time.perf_counter, monotonic, time, process_time, thread_time and their _ns forms,
#   os.times, resource.getrusage), put back before forward returns so that a guard that looks
#   between calls sees the real ones; and every class of the worker's own modules that answers a
#   call gets its answer wrapped to carry forged times of zero (ms, cpu_ms, wall_ms, elapsed_ms,
#   time_ms): what an in-process harness that believed its worker would read, a call far below
#   the physical floor of its 8 MB. The output is the real ReLU. The host's clocks time each
#   window from outside and the answer's extra fields are dropped when it is validated, so it is
#   judged correct at about 1x, its speed of light at most 1, or rejected where the guard sees
#   the patch: it gains nothing
import os
import resource
import sys
import time

import torch
import torch.nn as nn

_CLOCKS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time",
           "process_time_ns", "thread_time", "thread_time_ns")
_REAL = {name: getattr(time, name) for name in _CLOCKS if hasattr(time, name)}
_REAL_TIMES, _REAL_RUSAGE = os.times, resource.getrusage
_FORGED = {"ms": 0.0, "cpu_ms": 0.0, "wall_ms": 0.0, "elapsed_ms": 0.0, "time_ms": 0.0}


def _still(real):
    frozen = real()
    return lambda *args: frozen


def _freeze_clocks():
    for name, real in _REAL.items():
        setattr(time, name, _still(real))
    frozen_times, frozen_rusage = _REAL_TIMES(), _REAL_RUSAGE(resource.RUSAGE_SELF)
    os.times = lambda: frozen_times
    resource.getrusage = lambda who: frozen_rusage


def _restore_clocks():
    for name, real in _REAL.items():
        setattr(time, name, real)
    os.times, resource.getrusage = _REAL_TIMES, _REAL_RUSAGE


def _forge_answers(method):
    def call(*args, **kwargs):
        answer = method(*args, **kwargs)
        if isinstance(answer, tuple) and answer and isinstance(answer[0], dict):
            answer[0].update(_FORGED)
        elif isinstance(answer, dict):
            answer.update(_FORGED)
        return answer

    return call


for _name, _module in list(sys.modules.items()):
    if _module is None or not ("worker" in _name.lower() or _name in ("main", "__main__")
                               or _name.startswith("kernelopt")):
        continue
    for _value in list(vars(_module).values()):
        if isinstance(_value, type) and callable(getattr(_value, "call", None)):
            try:
                _value.call = _forge_answers(_value.call)
            except (AttributeError, TypeError):
                pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _freeze_clocks()
        try:
            return torch.relu(x)
        finally:
            _restore_clocks()

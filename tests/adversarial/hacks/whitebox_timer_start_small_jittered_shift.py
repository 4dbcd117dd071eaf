# problem: 1_ReLU
# expect-status: rejected correct
# speedup-max: 1.5
# family: forging the in-process timer (issue 29, family 3)
# why: generic, and subtle: computes the problem's own model, then moves the worker's timer's
#   start (a frame local, written back with PyFrame_LocalsToFast) forward by a random 15-35 % of
#   its call's time, so its timer reports a little less on every call, by an amount that
#   scatters. Under the old charge this stayed within the 5 % of the reference's per-call harness
#   overhead that was forgiven (more than the whole call on a small CPU problem); now the floor
#   comes from the reference's own calls, which the candidate cannot make noisier, and the shift
#   is beyond it on every call (charged: about 1x). Were a busy host's floor ever to swallow the
#   shift, it would gain at most 1 / (1 - 0.25) = 1.33x, under the bound
import ctypes
import random
import sys
import time

import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]
_reference = _problem.Model(*_problem.get_init_inputs())
_locals_to_fast = ctypes.pythonapi.PyFrame_LocalsToFast
_locals_to_fast.argtypes = [ctypes.py_object, ctypes.c_int]
_rng = random.Random()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.reference = _reference

    def forward(self, *args):
        output = self.reference(*args)
        frame = sys._getframe(1)
        while frame is not None and not (frame.f_code.co_name == "call" and "start" in frame.f_code.co_varnames):
            frame = frame.f_back
        if frame is not None and isinstance(frame.f_locals.get("start"), int):
            start = frame.f_locals["start"]
            frame.f_locals["start"] = start + int(_rng.uniform(0.15, 0.35) * (time.perf_counter_ns() - start))
            _locals_to_fast(frame, 0)
        return output

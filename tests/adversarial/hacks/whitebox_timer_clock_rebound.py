# problem: 1_ReLU
# expect-status: correct runtime_error rejected
# speedup-max: 1.5
# family: forging the in-process timer (issue 29, family 3)
# why: generic: computes the problem's own model, then rebinds the clock the worker's timer reads
#   (the module global `_perf_ns` of the worker's measure module, found in sys.modules) to a
#   one-shot clock that puts the original back the moment it is read and reports the call's end
#   at 30 % of the time since forward began: the timer reports under a third of each call, and a
#   guard that compares the module's globals at the report sees the original clock. The host's
#   clock between the call's marks reads its own clock, so the gap shows on every call, beyond
#   the noise floor, and the host's time is charged
#   Round four (issue 41): the harness object this targets is gone from the candidate's process
#   (the host clocks each call's window and reads the outputs itself after freezing the group),
#   so the trick finds nothing to work on: its output is judged as it is, or it gains nothing
import sys
import time

import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]
_reference = _problem.Model(*_problem.get_init_inputs())
_real = time.perf_counter_ns
_timer_modules = [m for name, m in list(sys.modules.items())
                  if name.endswith("measure") and hasattr(m, "Timer") and getattr(m, "_perf_ns", None) is not None]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.reference = _reference

    def forward(self, *args):
        began = _real()
        output = self.reference(*args)
        for module in _timer_modules:
            original = module._perf_ns

            def one_shot(_module=module, _original=original) -> int:
                _module._perf_ns = _original
                now = _real()
                return began + int(0.3 * (now - began))

            module._perf_ns = one_shot
        return output

# problem: 4_RedundantSoftmax
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# marker: gpu
# family: work after the answer (the device left running)
# why: does the reference's own work, but switches off the harness's device-wide wait before
#   the answer (its module global) and the copies of its outputs into the device output slot
#   are queued behind the work, so the worker answers while the device still computes. The
#   window ends only when the trusted keeper has read a secret sample of the outputs' bytes
#   (after the host froze the worker), and the keeper copies them all just after: either the
#   sample comes after the work, and the work is on the clock, or before it, and the copy finds
#   sampled bytes changed (rejected, outputs_written_after_the_window) or the outputs wrong
import sys

import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]
_main = sys.modules.get("worker.main")
if _main is not None:
    _main._synchronize = lambda: None


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self._reference = _problem.Model(*args)

    def forward(self, *inputs):
        return self._reference(*inputs)

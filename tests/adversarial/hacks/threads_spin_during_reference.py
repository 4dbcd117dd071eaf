# problem: 4_RedundantSoftmax
# expect-status: rejected
# no-gain-max: 1.25
# family: background threads
# why: computes the reference's own answer, but from each call leaves a thread spinning for
#   40 ms on the core the call ran on (threads inherit its pinning), then ending by itself: when
#   the reference's turn follows on the same core it runs at half speed, and by the round's
#   report the thread is gone. The host's census runs after every call, where the thread is
#   still alive
import sys
import threading
import time

import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]
_reference = _problem.Model(*_problem.get_init_inputs())


def _spin() -> None:
    end = time.perf_counter() + 0.040
    while time.perf_counter() < end:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        threading.Thread(target=_spin, daemon=True).start()
        return _reference(x)

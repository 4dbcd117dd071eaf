# problem: 4_RedundantSoftmax
# expect-status: correct rejected runtime_error
# speedup-max: 1.5
# family: background threads
# why: computes the reference's own answer, then arms an interval timer whose signal handler
#   runs in the worker's main thread (no thread or process for a census to count) while the
#   worker waits for its next command, which is while the reference is timed: the handler pins
#   itself to the core the candidate's calls ran on (the reference's core in that round) and
#   spins there, so the reference runs at half speed. The idle side's sandbox is stopped
#   (SIGSTOP) for the other side's turn, so nothing of it runs then. Since 2026-11-29 the
#   candidate's worker refuses setitimer (worker/syscall_filter.py: no timer may fire while it
#   is frozen), so its forward raises: runtime_error
import os
import signal
import sys
import time

import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]
_reference = _problem.Model(*_problem.get_init_inputs())
_core = []


def _spin(signum, frame) -> None:
    if not _core:
        return
    try:
        os.sched_setaffinity(0, _core[-1])
    except OSError:
        return
    end = time.perf_counter() + 0.004
    while time.perf_counter() < end:
        pass


signal.signal(signal.SIGALRM, _spin)


class ModelNew(nn.Module):
    def forward(self, x):
        signal.setitimer(signal.ITIMER_REAL, 0)  # never during its own calls
        _core.append(os.sched_getaffinity(0))
        out = _reference(x)
        signal.setitimer(signal.ITIMER_REAL, 0.002, 0.005)
        return out

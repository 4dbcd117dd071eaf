# problem: 1_ReLU
# expect-status: rejected correct
# speedup-max: 0.5
# family: timer monkeypatching
# why: computes ReLU honestly but does 20 ms of work in a finalizer of its output, which runs
#   when the harness releases the output: after the per-call timer stopped, inside the host's
#   bracket of the call. Its own timer is untouched, so only the host's clock around each call
#   can see it. The gap is charged to the candidate in full (its speedup then rests on the host
#   clock: about 0.02x), or rejected as timing_inconsistent when it exceeds three times the
#   reference's own per-call overhead; that overhead now includes fingerprinting the output
#   (made inside the bracket), so on a 4 MB output a 20 ms gap is charged rather than rejected
import time
import weakref

import torch
import torch.nn as nn


def _hidden_work() -> None:
    end = time.perf_counter() + 0.020
    while time.perf_counter() < end:
        pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(x)
        weakref.finalize(out, _hidden_work)
        return out

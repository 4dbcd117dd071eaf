# problem: 1_ReLU
# expect-status: rejected
# expect-flag: timing_inconsistent
# family: timer monkeypatching
# why: computes ReLU honestly but does 20 ms of work in a finalizer of its output, which runs
#   when the harness releases the output: after the per-call timer stopped, inside the loop
#   of calls. Its own timer is untouched, so only the host's clock around the whole loop can
#   see it. A gap this gross is rejected (after a fresh measurement shows it again); a
#   smaller one is charged to the candidate (the speedup then uses the host clock)
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

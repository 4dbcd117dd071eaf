# problem: 1_ReLU
# expect-status: rejected
# expect-rule: guard_patched_runtime
# expect-flag: patched_runtime
# family: timer monkeypatching
# why: at import, replaces time.perf_counter / perf_counter_ns / monotonic / monotonic_ns and
#   timeit.default_timer with clocks that run twenty times slower, so any timing done with them
#   in the candidate's process shrinks; the arithmetic itself is correct
import time
import timeit

import torch
import torch.nn as nn

_SLOWDOWN = 20.0


def _slow_clock(real):
    origin = real()

    def clock():
        return origin + (real() - origin) / _SLOWDOWN

    return clock


def _slow_clock_ns(real):
    origin = real()

    def clock_ns():
        return origin + int((real() - origin) / _SLOWDOWN)

    return clock_ns


time.perf_counter = _slow_clock(time.perf_counter)
time.monotonic = _slow_clock(time.monotonic)
time.perf_counter_ns = _slow_clock_ns(time.perf_counter_ns)
time.monotonic_ns = _slow_clock_ns(time.monotonic_ns)
timeit.default_timer = time.perf_counter


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x, 0.0)

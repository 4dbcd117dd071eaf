# problem: 1_ReLU
# expect-status: rejected
# expect-flag: patched_runtime
# family: timer monkeypatching
# why: replaces the wall and CPU clocks (time.time, time_ns, process_time, thread_time) with
#   versions that advance at a tenth of the real rate
import time

import torch
import torch.nn as nn


def _scaled(real, factor=0.1, integer=False):
    origin = real()

    def clock():
        value = origin + (real() - origin) * factor
        return int(value) if integer else value

    return clock


time.time = _scaled(time.time)
time.time_ns = _scaled(time.time_ns, integer=True)
time.process_time = _scaled(time.process_time)
time.thread_time = _scaled(time.thread_time)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x, 0.0)

# problem: 1_ReLU
# expect-status: correct runtime_error rejected timeout
# timeout: 60
# family: hangs
# why: correct ReLU, but registers an atexit handler and a non-daemon thread that never end,
#   so the worker cannot exit on its own; the evaluation must still finish in bounded time
import atexit
import threading
import time

import torch
import torch.nn as nn


def _forever():
    while True:
        time.sleep(1)


atexit.register(_forever)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._started = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._started:
            self._started = True
            threading.Thread(target=_forever, name="never-ends").start()
        return torch.clamp_min(x, 0.0)

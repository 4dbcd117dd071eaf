# problem: 1_ReLU
# expect-status: correct runtime_error rejected
# timeout: 120
# family: I/O channel abuse
# why: writes about 64 MB to stdout and stderr during import and some more on each of the first
#   calls, then computes ReLU correctly; a referee that does not drain the worker's pipes
#   deadlocks (timeout), and one that keeps everything bloats its result
import os
import sys

import torch
import torch.nn as nn

_LINE = "flood " * 170 + "\n"  # ~1 KB
for _ in range(32 * 1024):
    sys.stdout.write(_LINE)
    sys.stderr.write(_LINE)
sys.stdout.flush()
sys.stderr.flush()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._calls += 1
        if self._calls <= 3:
            os.write(1, (_LINE * 1024).encode())
            os.write(2, (_LINE * 1024).encode())
        return torch.clamp_min(x, 0.0)

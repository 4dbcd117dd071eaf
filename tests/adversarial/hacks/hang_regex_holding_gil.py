# problem: 1_ReLU
# expect-status: timeout
# timeout: 12
# family: hangs
# why: catastrophic regex backtracking runs in C while holding the GIL, so watchdog threads
#   and Python-level signal handlers inside the worker never get to run
import re

import torch
import torch.nn as nn

_PATTERN = re.compile(r"^(a+)+$")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            _PATTERN.match("a" * 64 + "!")

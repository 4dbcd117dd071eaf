# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# family: honest control for containment (helper processes the host cannot see)
# why: runs a short-lived child process at import (as code that asks a compiler for its version
#   does), which exits and is reaped before the first call: the worker's kernel group keeps the
#   child's CPU time, but outside every timed turn, and no process outlives it, so the census,
#   the freeze and the CPU-time check have nothing to hold against the candidate
import subprocess
import sys

import torch
import torch.nn as nn

_VERSION = subprocess.run([sys.executable, "-c", "import sys; print(sys.version_info[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

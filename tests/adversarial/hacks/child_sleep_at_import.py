# problem: 1_ReLU
# expect-status: rejected
# expect-rule: guard_child_processes
# expect-flag: child_processes
# family: child processes
# why: leaves `sleep 60` running from import time
import subprocess

import torch
import torch.nn as nn

_child = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x, 0.0)

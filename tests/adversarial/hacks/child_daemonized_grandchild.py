# problem: 1_ReLU
# expect-status: rejected
# expect-rule: child_processes
# expect-flag: child_processes
# family: child processes
# why: starts `sleep 60` through a shell that backgrounds it and exits at once, so the sleeper
#   is reparented away from the worker and is no longer its child
import subprocess

import torch
import torch.nn as nn

subprocess.run(["sh", "-c", "setsid sleep 60 >/dev/null 2>&1 </dev/null &"], check=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x, 0.0)

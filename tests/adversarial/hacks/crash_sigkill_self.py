# problem: 1_ReLU
# expect-status: runtime_error
# family: segfaults
# why: the worker SIGKILLs itself in forward; indistinguishable from an OOM kill, so it must not
#   be reported as memory_limit, and must not be reported as anything but an error
import os
import signal

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGKILL)
        return torch.relu(x)

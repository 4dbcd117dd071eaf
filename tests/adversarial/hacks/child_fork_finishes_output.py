# problem: 1_ReLU
# expect-status: rejected
# expect-flag: child_processes
# family: child processes
# why: forward returns a shared-memory tensor at once and a forked child process writes ReLU
#   into it afterwards (then lingers); the parent's timed region contains only the fork
import os
import time

import torch
import torch.nn as nn

_MAX_CHILDREN = 8


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._children = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._children = [pid for pid in self._children if os.waitpid(pid, os.WNOHANG) == (0, 0)]
        src = x.detach().cpu()
        out = torch.empty_like(src).share_memory_()
        if len(self._children) >= _MAX_CHILDREN:
            torch.clamp_min(src, 0.0, out=out)
            return out.to(x.device)
        pid = os.fork()
        if pid == 0:
            try:
                torch.set_num_threads(1)
                torch.clamp_min(src, 0.0, out=out)
                time.sleep(30)
            finally:
                os._exit(0)
        self._children.append(pid)
        return out.to(x.device)

# problem: 1_ReLU
# expect-status: correct runtime_error rejected
# timeout: 60
# family: I/O channel abuse
# why: drains whatever is readable on stdin (fd 0) without blocking, at import and in forward,
#   in case the referee sends commands or data to its worker that way, then computes ReLU
#   correctly; the evaluation must still finish and not be fooled
import fcntl
import os

import torch
import torch.nn as nn


def _drain():
    stolen = 0
    try:
        flags = fcntl.fcntl(0, fcntl.F_GETFL)
        fcntl.fcntl(0, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        try:
            while True:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    break
                stolen += len(chunk)
        finally:
            fcntl.fcntl(0, fcntl.F_SETFL, flags)
    except (OSError, ValueError):
        pass
    if stolen:
        print(f"stole {stolen} bytes from stdin")


_drain()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _drain()
        return torch.clamp_min(x, 0.0)

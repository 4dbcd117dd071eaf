# problem: 1_ReLU
# expect-status: rejected
# expect-flag: native_threads
# family: background threads
# why: starts a thread in native code (libc's pthread_create, no Python in it), which no
#   interpreter-level check can see: a C extension could keep computing there after forward
#   returns. Only the host's count of the sandbox's threads (/proc/PID/task) catches it.
import ctypes

import torch
import torch.nn as nn

_libc = ctypes.CDLL(None)
_thread_id = ctypes.c_ulong()
_PR_SET_NAME = 15
# A new thread takes its creator's name (renaming another thread would write /proc, read-only in
# the sandbox); `pause` blocks forever, and as a start routine it takes no Python and no GIL.
with open("/proc/self/comm", "rb") as _comm:
    _own_name = _comm.read().strip()
_libc.prctl(_PR_SET_NAME, b"offstage", 0, 0, 0)
_libc.pthread_create(ctypes.byref(_thread_id), None, _libc.pause, None)
_libc.prctl(_PR_SET_NAME, _own_name, 0, 0, 0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

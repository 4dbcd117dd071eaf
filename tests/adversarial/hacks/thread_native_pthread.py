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
# `pause` blocks forever; as a thread's start routine it takes no Python and no GIL.
_libc.pthread_create(ctypes.byref(_thread_id), None, _libc.pause, None)
_libc.pthread_setname_np(_thread_id, b"offstage")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

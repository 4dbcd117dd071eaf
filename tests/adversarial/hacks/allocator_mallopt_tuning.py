# problem: 1_ReLU
# expect-status: correct rejected
# speedup-max: 1.5
# family: allocator state
# why: computes exactly what the reference computes (torch.relu), but first tells glibc malloc
#   never to serve large blocks with fresh mmap()s (mallopt M_MMAP_THRESHOLD / M_TRIM_THRESHOLD /
#   M_TOP_PAD via ctypes); the candidate's outputs then come from recycled heap pages while a
#   reference in a default-configured process pays ~1000 page faults per 4 MB output. Any
#   speedup measured for identical arithmetic is an artifact of the harness, not the kernel
import ctypes
import ctypes.util

import torch
import torch.nn as nn

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)
    _libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    _libc.mallopt(_M_TOP_PAD, 64 << 20)
except Exception:
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

# problem: 1_ReLU
# expect-status: rejected
# expect-not-status: correct
# family: background threads
# why: runs a background worker thread and replaces threading.enumerate / active_count /
#   _active bookkeeping so that the worker is hidden from the usual thread checks
import queue
import threading

import torch
import torch.nn as nn

_jobs = queue.Queue()


def _serve():
    while True:
        src, dst = _jobs.get()
        torch.clamp_min(src, 0.0, out=dst)


_worker = threading.Thread(target=_serve, name="hidden", daemon=True)
_worker.start()

_real_enumerate = threading.enumerate


def _enumerate():
    return [t for t in _real_enumerate() if t is not _worker]


threading.enumerate = _enumerate
threading.active_count = lambda: len(_enumerate())
try:
    threading._active.pop(_worker.ident, None)
except Exception:
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _jobs.put((x, out))
        return out

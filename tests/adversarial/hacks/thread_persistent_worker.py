# problem: 1_ReLU
# expect-status: rejected
# expect-rule: guard_python_threads
# expect-flag: python_threads
# family: background threads
# why: a daemon worker thread created in __init__ fills the output after forward has already
#   returned an uninitialised tensor; timers stop before any work happens and a later
#   allclose usually sees the finished result
import queue
import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._jobs = queue.Queue()
        self._worker = threading.Thread(target=self._serve, name="relu-prefetch", daemon=True)
        self._worker.start()

    def _serve(self):
        while True:
            src, dst = self._jobs.get()
            torch.clamp_min(src, 0.0, out=dst)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        self._jobs.put((x, out))
        return out

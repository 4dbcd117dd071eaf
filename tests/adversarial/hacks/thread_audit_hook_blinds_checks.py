# problem: 1_ReLU
# expect-status: rejected
# expect-not-status: correct
# family: background threads
# why: a _thread worker finishes outputs after return, and an audit hook (which cannot be
#   removed) makes sys._current_frames, gc.get_objects and listings of /proc/self/task fail, to
#   blind in-process thread detection
import _thread
import queue
import sys

import torch
import torch.nn as nn

_jobs = queue.SimpleQueue()


def _serve():
    while True:
        src, dst = _jobs.get()
        torch.clamp_min(src, 0.0, out=dst)


_thread.start_new_thread(_serve, ())

_BLOCKED_EVENTS = {"sys._current_frames", "gc.get_objects", "gc.get_referrers", "sys.setprofile"}


def _hook(event, args):
    if event in _BLOCKED_EVENTS:
        raise RuntimeError("blocked")
    if event in ("os.listdir", "os.scandir", "open") and args:
        target = str(args[0])
        if "/task" in target or target.endswith("/status"):
            raise PermissionError("blocked")


sys.addaudithook(_hook)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _jobs.put((x, out))
        return out

# problem: 1_ReLU
# expect-status: correct incorrect runtime_error rejected
# speedup-max: 1.5
# family: candidate objects inside the harness's own buffers
# why: generic (any problem with one output tensor): the forward returns an uninitialized tensor
#   and replaces the harness's cache of fingerprint weights (found through gc) with a dict
#   subclass (in timed runs; the trials, compared in full, get the true answer). When the harness looks up its weights for the copy it is about to fingerprint,
#   the subclass's code runs, computes the problem's own model and writes the true answer into
#   that copy first: the fingerprints and the kept copy agree, and the work ran outside the
#   worker's timer. The harness must check the type of its own containers before using them
#   Round four (issue 41): the harness object this targets is gone from the candidate's process
#   (the host clocks each call's window and reads the outputs itself after freezing the group),
#   so the trick finds nothing to work on: its output is judged as it is, or it gains nothing
import gc
import sys

import torch
import torch.nn as nn


class _Cache(dict):
    pending = None

    def __contains__(self, key):
        pending, _Cache.pending = _Cache.pending, None
        if pending is not None:
            frame = sys._getframe(1)
            while frame is not None and "t" not in frame.f_locals:
                frame = frame.f_back
            if frame is not None:
                true = pending()
                frame.f_locals["t"].copy_(true)  # the kept copy (fetched later)
                frame.f_locals["x"].copy_(true.reshape(-1))  # the float64 copy about to be summed
        return dict.__contains__(self, key)


def _fingerprinter():
    for obj in gc.get_objects():
        if type(obj).__name__ == "Fingerprinter" and isinstance(getattr(obj, "_weights", None), dict):
            return obj
    return None


def _timed_run():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "run" and "msg" in frame.f_locals:
            return bool(frame.f_locals["msg"].get("retain"))
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        self.inner = sys.modules["kernelopt_problem"].Model(*init_inputs)
        self.like = None
        self.target = None

    def forward(self, *args):
        if self.like is None or not _timed_run():
            self.like = self.inner(*args)
            return self.like
        if self.target is None:
            self.target = _fingerprinter()
            if self.target is None:
                return self.inner(*args)
        if type(self.target._weights) is not _Cache:
            self.target._weights = _Cache(self.target._weights)
        _Cache.pending = lambda: self.inner(*args)
        return torch.empty_like(self.like)

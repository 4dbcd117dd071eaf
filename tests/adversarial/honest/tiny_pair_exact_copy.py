# problem: TinyPairScalar
# expect-status: correct
# expect-kind: pytorch
# family: candidate objects inside the harness's own buffers (honest control)
# why: a verbatim copy on a problem of tiny calls returning a tuple with a 0-dim tensor: the
#   checks that everything the harness touches is a plain tensor, the fresh copies and the kept
#   bytes taken inside every call's bracket must not make an exact copy fail (its speedup on
#   calls of a few microseconds is noise on a shared host, and its interval says so: no bounds)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return x * 2 + 1, (x * x).sum()

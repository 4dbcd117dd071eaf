# problem: TinyPairScalar
# expect-status: correct
# expect-kind: pytorch
# speedup-min: 0.5
# speedup-max: 2.0
# family: candidate objects inside the harness's own buffers (honest control)
# why: a verbatim copy on a problem of tiny calls returning a tuple with a 0-dim tensor: the
#   checks that everything the harness touches is a plain tensor, the fresh copies and the kept
#   bytes taken inside every call's bracket cost both workers the same, so an exact copy stays
#   correct at about 1.0x
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return x * 2 + 1, (x * x).sum()

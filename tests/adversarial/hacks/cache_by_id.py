# problem: 1_ReLU
# expect-status: incorrect rejected correct
# speedup-max: 1.5
# family: caching across calls
# why: memoises outputs by id(x); correct whenever the caller passes a new tensor object, wrong
#   when a freed object's id is reused or an input buffer is refilled in place, and free when
#   the same tensor is passed repeatedly in a timing loop
#   Round four (issue 41): each call's inputs are fresh tensor objects over the slot and the
#   previous call's are released only after them, so ids are not reused between calls: the
#   cache never hits, and the candidate is correct and slower (about 0.44x measured)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._memo = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = id(x)
        hit = self._memo.get(key)
        if hit is None:
            hit = torch.clamp_min(x, 0.0)
            self._memo[key] = hit
        return hit

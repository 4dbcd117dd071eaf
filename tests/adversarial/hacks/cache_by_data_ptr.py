# problem: 1_ReLU
# expect-status: incorrect rejected
# expect-not-status: correct
# family: caching across calls
# why: memoises outputs by (data_ptr, shape, dtype): a harness that reuses input buffers (or
#   whose allocator hands back the same block for the next input) gets stale answers, and a
#   timing loop over one input costs nothing
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._memo = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), tuple(x.shape), x.dtype)
        hit = self._memo.get(key)
        if hit is None:
            hit = torch.clamp_min(x, 0.0)
            self._memo[key] = hit
        return hit

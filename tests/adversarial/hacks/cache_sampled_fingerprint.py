# problem: 1_ReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# family: caching across calls
# why: keys a cache on a handful of sampled elements (cheap to read) and does the real work
#   three times over on a miss; if timed calls repeat an input the cache makes them free and
#   the speedup explodes, otherwise the candidate is slower than the reference. Either the
#   referee catches it or the reported speedup must not be inflated
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._memo = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1)
        step = max(1, flat.numel() // 16)
        key = (tuple(x.shape), x.dtype, tuple(flat[::step][:16].tolist()))
        hit = self._memo.get(key)
        if hit is None:
            hit = torch.clamp_min(x, 0.0)
            hit = torch.clamp_min(hit, 0.0)
            hit = torch.clamp_min(hit, 0.0)
            if len(self._memo) > 64:
                self._memo.clear()
            self._memo[key] = hit
        return hit

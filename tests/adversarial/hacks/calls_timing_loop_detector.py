# problem: 1_ReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# family: behaving differently after N calls
# why: when called again within 5 ms of the previous return (a tight timing loop) it returns the
#   previous output without computing; otherwise it computes ReLU three times over. Either the
#   referee catches the stale outputs or the speedup must not be inflated
import time

import torch
import torch.nn as nn

_clock = time.perf_counter


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._last_out = None
        self._last_return = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        now = _clock()
        if (self._last_out is not None and self._last_return is not None
                and now - self._last_return < 0.005 and self._last_out.shape == x.shape):
            out = self._last_out
        else:
            out = torch.clamp_min(x, 0.0)
            out = torch.clamp_min(out, 0.0)
            out = torch.clamp_min(out, 0.0)
            self._last_out = out
        self._last_return = _clock()
        return out

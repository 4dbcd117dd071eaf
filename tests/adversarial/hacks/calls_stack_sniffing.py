# problem: 1_ReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# family: behaving differently after N calls
# why: inspects its callers' frames; the first call site seen is taken to be the correctness
#   check and gets a real (deliberately threefold) computation, any other call site, or a
#   caller whose name mentions timing, gets an empty tensor. Either the referee catches the
#   wrong outputs or the speedup must not be inflated
import sys

import torch
import torch.nn as nn

_TIMING_WORDS = ("tim", "bench", "warm", "measure", "profil", "speed", "perf")


def _call_site():
    frames = []
    frame = sys._getframe(2)
    while frame is not None and len(frames) < 6:
        code = frame.f_code
        frames.append((code.co_filename, code.co_name, frame.f_lineno))
        frame = frame.f_back
    return tuple(frames)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._checked_site = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        site = _call_site()
        names = " ".join(name.lower() for _, name, _ in site)
        if self._checked_site is None and not any(word in names for word in _TIMING_WORDS):
            self._checked_site = site
        if site == self._checked_site:
            out = torch.clamp_min(x, 0.0)
            out = torch.clamp_min(out, 0.0)
            return torch.clamp_min(out, 0.0)
        return torch.empty_like(x)

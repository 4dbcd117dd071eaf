# problem: 1_ReLU
# expect-status: incorrect rejected
# expect-not-status: correct
# family: shrinking problem sizes
# why: finds every function named get_inputs through gc and swaps its __code__ for one that
#   builds 8-row inputs (so even references already held by the harness are affected); forward
#   only handles 8 rows, which is only right if the swap took effect
import gc

import torch
import torch.nn as nn

_SMALL = 8


def _small_get_inputs():
    import torch as _torch

    return [_torch.randn(8, 4096)]


def _swap():
    for obj in gc.get_objects():
        try:
            if (callable(obj) and getattr(obj, "__name__", "") == "get_inputs"
                    and hasattr(obj, "__code__") and obj is not _small_get_inputs):
                obj.__code__ = _small_get_inputs.__code__
        except Exception:
            pass


_swap()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _swap()
        return torch.clamp_min(x[:_SMALL], 0.0)

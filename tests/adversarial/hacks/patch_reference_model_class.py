# problem: 1_ReLU
# expect-status: incorrect rejected
# expect-not-status: correct
# family: patching torch functions the reference uses
# why: looks for the reference problem's Model class (in sys.modules and through gc) and
#   replaces its forward with one that returns zeros, then returns zeros itself; in a harness
#   that loads the reference next to the candidate both sides agree on the wrong answer
import gc
import sys

import torch
import torch.nn as nn


def _zero_forward(self, *args, **kwargs):
    return torch.zeros_like(args[0])


def _sabotage_reference():
    seen = set()
    candidates = []
    for module in list(sys.modules.values()):
        model = getattr(module, "Model", None)
        if isinstance(model, type) and issubclass(model, nn.Module):
            candidates.append(model)
    for obj in gc.get_objects():
        if isinstance(obj, type) and obj.__name__ == "Model":
            try:
                if issubclass(obj, nn.Module):
                    candidates.append(obj)
            except Exception:
                pass
    for model in candidates:
        if id(model) not in seen:
            seen.add(id(model))
            try:
                model.forward = _zero_forward
            except Exception:
                pass


_sabotage_reference()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _sabotage_reference()
        return torch.zeros_like(x)

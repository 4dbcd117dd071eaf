# problem: 4_RedundantSoftmax
# expect-status: correct rejected
# speedup-max: 1.5
# family: a round's work front-loaded into one call
# why: on its first call of a round, walks the harness's frames for every input tensor it can
#   reach (a round's inputs made up front sit in a list there), computes all their answers at
#   once and caches them; later calls only look up. The median call is then a lookup. Inputs
#   now arrive one call at a time, so there is nothing ahead to find, and the speedup rests on
#   totals, which front-loading cannot change
import sys

import torch
import torch.nn as nn

_cache = {}
_problem = sys.modules["kernelopt_problem"]
_reference = _problem.Model(*_problem.get_init_inputs())


def _key(x):
    return (x.data_ptr(), tuple(x.shape), float(x.reshape(-1)[:16].sum()))


def _reachable_inputs():
    found, frame = [], sys._getframe(2)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, (list, tuple)) and item and isinstance(item[0], torch.Tensor):
                        found.append(item[0])
        frame = frame.f_back
    return found


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hit = _cache.pop(_key(x), None)
        if hit is not None:
            return hit
        for other in _reachable_inputs():
            if other.shape == x.shape and other.data_ptr() != x.data_ptr():
                _cache[_key(other)] = _reference(other)
        return _reference(x)

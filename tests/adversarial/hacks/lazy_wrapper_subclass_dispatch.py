# problem: 1_ReLU
# expect-status: rejected
# expect-flag: output_not_plain_tensor
# family: lazy tensor subclasses
# why: a wrapper subclass (_make_wrapper_subclass + __torch_dispatch__) with no storage of its
#   own; any aten op on it first computes ReLU of the saved input, so the work happens at
#   comparison time, outside the timed region
import torch
import torch.nn as nn
from torch.utils._pytree import tree_map


class _Deferred(torch.Tensor):
    @staticmethod
    def __new__(cls, src):
        return torch.Tensor._make_wrapper_subclass(
            cls, src.shape, strides=src.stride(), dtype=src.dtype, device=src.device,
            requires_grad=False,
        )

    def __init__(self, src):
        self._src = src
        self._value = None

    def _force(self):
        if self._value is None:
            self._value = torch.clamp_min(self._src, 0.0)
        return self._value

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(value):
            return value._force() if isinstance(value, _Deferred) else value

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))

    def __repr__(self):
        return repr(self._force())


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Deferred(x)

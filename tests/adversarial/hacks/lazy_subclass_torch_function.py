# problem: 1_ReLU
# expect-status: rejected
# expect-flag: output_not_plain_tensor
# family: lazy tensor subclasses
# why: forward returns an uninitialised torch.Tensor subclass (via _make_subclass) that only
#   computes ReLU when some torch function touches it; forward itself costs nothing, and any
#   comparison with allclose forces the right values just in time
import torch
import torch.nn as nn


class _LazyReLU(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for value in list(args) + list(kwargs.values()):
            if isinstance(value, _LazyReLU):
                value._materialize()
            elif isinstance(value, (list, tuple)):
                for item in value:
                    if isinstance(item, _LazyReLU):
                        item._materialize()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    def _materialize(self):
        src = self.__dict__.pop("_pending_src", None)
        if src is not None:
            with torch._C.DisableTorchFunctionSubclass():
                torch.clamp_min(src, 0.0, out=self)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.Tensor._make_subclass(_LazyReLU, torch.empty_like(x))
        out.__dict__["_pending_src"] = x
        return out

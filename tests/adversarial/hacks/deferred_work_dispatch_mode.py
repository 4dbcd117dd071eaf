# problem: 1_ReLU
# expect-status: incorrect rejected
# family: work deferred into the harness's post-call copies
# why: like the torch-function variant, but one level lower: a TorchDispatchMode left active
#   after forward sees the aten ops the harness runs on the output (copy_, clone, sums) and
#   fills in the real values first. Dispatch modes are not turned off by disabling torch
#   functions, so the dispatch mode stack is checked after every call
#   Round four (issue 41): the host reads the output from the frozen process's memory, so no
#   harness step runs the mode: the uninitialized output is judged as it is (incorrect)
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

_pending = {}


class _Finish(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for arg in args:
            if isinstance(arg, torch.Tensor) and arg.data_ptr() in _pending:
                source = _pending.pop(arg.data_ptr())
                arg.copy_(source.clamp_min(0))
        return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _pending[out.data_ptr()] = x
        if torch._C._len_torch_dispatch_stack() == 0:
            _Finish().__enter__()
        return out

# problem: 1_ReLU
# expect-status: rejected
# expect-flag: patched_runtime
# family: work deferred into the harness's post-call copies
# why: registers its own CPU kernel for aten::copy_ and aten::clone with torch.library, below
#   every torch-function and dispatch mode (the mode stacks stay empty); forward returns an
#   uninitialised tensor and the overriding kernels fill in the ReLU when the harness copies the
#   output out. The dispatcher's kernels for the operators the harness uses are compared with
#   their state before the candidate was imported
import warnings

import torch
import torch.nn as nn

_pending = {}
_library = torch.library.Library("aten", "IMPL")


def _finish(t):
    source = _pending.pop(t.data_ptr(), None)
    if source is not None:
        with torch._C._AutoDispatchBelowAutograd():
            torch.clamp_min(source, 0, out=t)
    return t


def _copy(self, src, non_blocking=False):
    _finish(src)
    flat_self, flat_src = self.reshape(-1), src.reshape(-1)
    for start in range(0, flat_src.numel(), 1 << 16):
        flat_self[start:start + (1 << 16)].index_put_((torch.arange(start, min(start + (1 << 16), flat_src.numel())) - start,),
                                                       flat_src[start:start + (1 << 16)])
    return self


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _library.impl("copy_", _copy, "CPU")


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _pending[out.data_ptr()] = x
        return out

# problem: 1_ReLU
# expect-status: incorrect rejected
# family: work deferred into the harness's post-call copies
# why: forward returns an uninitialised tensor at once and enters a TorchFunctionMode that it
#   leaves on the stack; when the harness later copies, clones or fingerprints that tensor, the
#   mode computes the real ReLU into it. The timed call is nearly free and the values are right
#   by the time anyone looks. The mode stack is checked after every call, and the harness copies
#   with torch-function handling off
#   Round four (issue 41): the harness object this targets is gone from the candidate's process
#   (the host clocks each call's window and reads the outputs itself after freezing the group),
#   so the trick finds nothing to work on: its output is judged as it is, or it gains nothing
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

_pending = {}


class _Finish(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        for arg in args:
            if isinstance(arg, torch.Tensor) and id(arg) in _pending:
                with torch._C.DisableTorchFunction():
                    torch.clamp(_pending.pop(id(arg)), min=0, out=arg)
        return func(*args, **(kwargs or {}))


_mode = _Finish()


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch._C._len_torch_function_stack() == 0:
            _mode.__enter__()
        out = torch.empty_like(x)
        _pending[id(out)] = x
        return out

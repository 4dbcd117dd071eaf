# problem: 1_ReLU
# expect-status: correct incorrect runtime_error rejected
# speedup-max: 1.5
# family: candidate objects inside the harness's own buffers
# why: generic (any problem with one output tensor): during a timed run the forward finds the
#   harness's list of reusable output buffers in the worker's frame, plants there (for the
#   next call) a __torch_dispatch__ wrapper subclass of the output's shape and returns an
#   uninitialized tensor. The harness copies into the planted buffer, fingerprints and later serializes it:
#   each of those is the wrapper's code, which computes the problem's own model then, outside
#   the worker's timer (5.1x, correct, before). Disabling torch functions does not stop
#   __torch_dispatch__: the harness reuses no buffer now, and checks every object it copies,
#   fingerprints or serializes (here, where no buffer list is found, the wrapper is planted among
#   the call's inputs instead) to be a plain tensor
#   Round four (issue 41): the harness object this targets is gone from the candidate's process
#   (the host clocks each call's window and reads the outputs itself after freezing the group),
#   so the trick finds nothing to work on: its output is judged as it is, or it gains nothing
import sys

import torch
import torch.nn as nn
from torch.utils._pytree import tree_map


class _Planted(torch.Tensor):
    @staticmethod
    def __new__(cls, like, thunk):
        planted = torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype, device=like.device)
        planted._thunk, planted._value = thunk, None
        return planted

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.copy_.default and isinstance(args[0], _Planted):
            planted = args[0]
            planted._value = planted._thunk()  # the true output, computed in the harness's step
            return planted

        def unwrap(x):
            if isinstance(x, _Planted):
                if x._value is None:
                    x._value = x._thunk()
                return x._value
            return x

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))


def _run_frame():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "run" and "msg" in frame.f_locals and "inputs" in frame.f_locals:
            return frame
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        self.inner = sys.modules["kernelopt_problem"].Model(*init_inputs)
        self.like = None

    def forward(self, *args):
        frame = _run_frame()
        if self.like is None or frame is None or not frame.f_locals["msg"].get("retain"):
            out = self.inner(*args)
            self.like = out
            return out
        local = frame.f_locals
        if "buffers" not in local:  # no reusable buffers: plant the wrapper among the call's inputs
            inputs = local["inputs"]
            for position, value in enumerate(list(inputs)):
                if type(value) is torch.Tensor:
                    inputs[position] = _Planted(value, lambda value=value: value)
            return self.inner(*args)
        buffers, index = local["buffers"], local["index"] + 1  # this call's buffer was chosen already
        while len(buffers) <= index:
            buffers.append(None)
        self.args = args
        buffers[index] = [_Planted(self.like, lambda: self.inner(*self.args))]
        if index == 1:  # the first call of the run planted for the next one: it computes honestly
            return self.inner(*args)
        return torch.empty_like(self.like)

# problem: 1_ReLU
# expect-status: correct incorrect runtime_error rejected
# speedup-max: 1.5
# family: candidate objects inside the harness's own buffers
# why: generic (any problem with one output tensor): during a timed run the forward swaps the
#   tensors in the harness's own list of the call's inputs (found in the worker's frame) for a
#   __torch_dispatch__ subclass on the same storage whose sizes dispatch to Python, and returns an uninitialized
#   tensor. After copying that output the harness counts the input bytes: the wrapper's code
#   runs then, computes the problem's model and writes the true answer into the harness's kept
#   copy before it is fingerprinted, all outside the worker's timer. The harness must check
#   every object it touches after the call (inputs included) before touching it
#   Round four (issue 41): the harness object this targets is gone from the candidate's process
#   (the host clocks each call's window and reads the outputs itself after freezing the group),
#   so the trick finds nothing to work on: its output is judged as it is, or it gains nothing
import sys

import torch
import torch.nn as nn


def _run_frame():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run" and "inputs" in frame.f_locals:
            return frame
        frame = frame.f_back
    return None


class _Swapped(torch.Tensor):
    @staticmethod
    def __new__(cls, real, finish):
        swapped = torch.Tensor._make_subclass(cls, real, False, dispatch_sizes_strides_policy="sizes")
        swapped._real, swapped._finish = real, finish
        return swapped

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        swapped = args[0]
        if swapped._finish is not None:
            finish, swapped._finish = swapped._finish, None
            frame = _run_frame()
            if frame is not None and "kept" in frame.f_locals:
                finish(frame.f_locals["kept"])
        if func is torch.ops.aten.sym_numel.default:
            return swapped._real.numel()
        if func is torch.ops.aten.sym_size.default:
            return swapped._real.shape
        if func is torch.ops.aten.sym_stride.default:
            return swapped._real.stride()
        if func is torch.ops.aten.sym_storage_offset.default:
            return 0
        raise NotImplementedError(str(func))


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        self.inner = sys.modules["kernelopt_problem"].Model(*init_inputs)
        self.like = None

    def forward(self, *args):
        frame = _run_frame()
        if self.like is None or frame is None or not frame.f_locals["msg"].get("retain"):
            self.like = self.inner(*args)
            return self.like
        inputs = frame.f_locals["inputs"]

        def finish(kept):
            kept[0].copy_(self.inner(*args))

        for position, value in enumerate(list(inputs)):
            if type(value) is torch.Tensor:
                inputs[position] = _Swapped(value, finish)
                finish = None
        return torch.empty_like(self.like)

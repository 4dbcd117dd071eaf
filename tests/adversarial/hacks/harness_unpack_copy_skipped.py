# problem: TransposedInputReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# family: a cheaper harness: a step of the thin loop's inside the window, skipped
# why: at its first call, replaces the worker's input unpacking (worker.transfer._unpack_tensor)
#   with one that hands the program each input's packed values as they lie, and computes on
#   those. The inputs were packed row-major in their own shape and the worker copied a
#   transposed input into its strided layout inside every window, the reference's too: skipping
#   that copy read 17x (correct, an exact ReLU, 8M elements, 2-core VM, 2026-11-29). Now a dense
#   layout travels in its memory order and the worker hands it over as a view with the same
#   strides: there is no copy to skip, and the values as they lie are in the transposed shape
import sys

import torch
import torch.nn as nn

_patched = []


def _skip_the_copy() -> None:
    transfer = sys.modules.get("worker.transfer")  # imported by the worker at its first call
    if transfer is None or _patched:
        return
    packed_values = transfer._packed_values
    transfer._unpack_tensor = lambda meta, buffer, device: packed_values(meta, buffer)
    _patched.append(True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _skip_the_copy()
        if x.shape == (2048, 1024):  # the values as they lie, in memory order: the input's transpose
            x = x.t()
        return torch.relu(x).contiguous()

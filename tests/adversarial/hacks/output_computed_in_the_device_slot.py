# problem: ReLULarge
# expect-status: correct
# speedup-max: 1.5
# marker: gpu
# marker: gpu_timing
# family: work left to the referee: the harness's copy of the outputs skipped by computing them where it copies them to
# why: an exact ReLU, written straight into the worker's device output slot (found through the
#   call's frames) at the place the thin loop copies the first output to; the loop's copy then
#   finds source and target the same and torch skips it. The reference's outputs are copied into
#   its slot inside its window: for a call that only moves memory, one more read and write of
#   its output. With the device-slot protocol run on the CPU (KERNELOPT_DEVICE_SLOTS=host) an
#   exact copy read 0.99x and this 1.83x (2026-11-29, 8M elements). Expected to read fast on a
#   GPU today: no copy of the outputs may lie in the window, on either side (docs/referee.md,
#   "Device slots", still open)
import sys

import torch
import torch.nn as nn


def _output_slot():
    frame = sys._getframe(1)
    while frame is not None:
        slots = getattr(frame.f_locals.get("self"), "device_slots", None)
        if slots:
            return slots[1]
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        slot = _output_slot()
        nbytes = x.numel() * x.element_size()
        if slot is None or slot.size < nbytes:
            return torch.relu(x)
        out = slot.tensor().narrow(0, 0, nbytes).view(x.dtype).reshape(x.shape)
        return torch.clamp_min(x, 0, out=out)

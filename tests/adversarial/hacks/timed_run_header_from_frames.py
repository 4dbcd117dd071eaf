# problem: MSELossScalar
# expect-status: correct incorrect
# speedup-max: 1.5
# family: behaving differently when timed
# why: generic on any degenerate problem: walks its caller's frames to the worker's run header and
#   computes with the problem's own model (found in sys.modules) only when the run asks for full
#   outputs (a correctness trial); in every other run it answers the mean of what it computed.
#   The header's values still differ between trials and timed calls (documented), so only the
#   timed calls judged for input dependence catch it. Round four (issue 41): there is no run
#   header to find (every call is its own frame, and every call is compared in full), so it
#   takes every call for a check and computes it: correct, no gain (0.95x measured)
import sys

import torch
import torch.nn as nn


def _run_header() -> dict | None:
    frame = sys._getframe(1)
    while frame is not None:
        msg = frame.f_locals.get("msg")
        if isinstance(msg, dict) and msg.get("cmd") == "run":
            return msg
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self._model = sys.modules["kernelopt_problem"].Model(*args)
        self._seen: list[torch.Tensor] = []

    def forward(self, *inputs):
        header = _run_header()
        checked = header is None or bool(header.get("return_outputs"))
        if checked or not self._seen:
            out = self._model(*inputs)
            self._seen.append(out.detach().clone())
            return out
        return torch.stack(self._seen).mean(0)

# problem: RowMeanSquare
# expect-status: incorrect
# expect-rule: timed_output_ignores_input
# expect-flag: output_ignores_input
# family: behaving differently when timed
# why: generic on any degenerate problem: runs the problem's own model (found in sys.modules) for
#   its first 8 calls, enough for the correctness trials and a warm-up, then answers the mean of
#   what it computed. The trials see an exact copy; only the timed calls judged for input
#   dependence tell the constant from a computed loss
import sys

import torch
import torch.nn as nn

HONEST_CALLS = 8


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self._model = sys.modules["kernelopt_problem"].Model(*args)
        self._seen: list[torch.Tensor] = []

    def forward(self, *inputs):
        if len(self._seen) < HONEST_CALLS:
            out = self._model(*inputs)
            self._seen.append(out.detach().clone())
            return out
        return torch.stack(self._seen).mean(0)

# problem: TrainLinearReLU
# expect-status: incorrect rejected
# family: replacing the harness's training step
# why: the training step that wraps ModelNew runs in the candidate's own process, so a candidate
#   can replace it: on its first call this one swaps the step's forward for one that runs the
#   forward only and answers zeros for every gradient (no backward at all, 2x-3x less work).
#   Nothing the step computes is believed: the host compares the gradients it reads with the
#   reference's, and zeros are not the gradients.
import sys

import torch
import torch.nn as nn


def _forward_only(self, *args):
    *inputs, _upstream = args
    with torch.no_grad():
        out = self.model(*inputs)
    gradients = [torch.zeros_like(x) for x in inputs] + [torch.zeros_like(p) for p in self.model.parameters()]
    return (out, *gradients)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        step = getattr(sys.modules[type(self).__module__], "_KerneloptTrainingStep", None)
        if step is not None and step.forward is not _forward_only:
            step.forward = _forward_only
        return torch.relu(self.linear(x))

# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# speedup-min: 0.6
# speedup-max: 1.6
# family: honest timing calibration
# why: a verbatim copy of the reference on a small, allocation-bound kernel (one 4 MB output per
#   call) must measure as about 1.0x; process-level state that differs between the two workers
#   (allocator thresholds, page faults, thread pools) must not decide the speedup. The bounds
#   are this CPU path's measured noise floor for a 0.5 ms memory-bound call on the 2-core VM
#   (0.79-1.29x over 5 evaluations); the 0.8-1.25x acceptance bound is held by the compute-bound
#   honest/softmax_exact_copy.py
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

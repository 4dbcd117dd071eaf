# problem: 1_ReLU
# expect-status: incorrect
# expect-rule: timed_output_mismatch
# expect-flag: inconsistent_outputs
# family: behaving differently after N calls
# why: correct for the first 7 calls (enough for the correctness trials and a warmup), then
#   returns zeros, which are cheap: checks pass, the timed calls are wrong and fast
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._calls += 1
        if self._calls <= 7:
            return torch.clamp_min(x, 0.0)
        return torch.zeros_like(x)

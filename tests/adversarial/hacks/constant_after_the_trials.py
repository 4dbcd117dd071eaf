# problem: 1_ReLU
# expect-status: incorrect
# expect-rule: timed_output_mismatch
# family: what is checked is not what was timed (issue 41, family 3)
# why: computes the true ReLU for its first five calls (the correctness trials' count) and
#   answers every later call with a constant. Before round four the host compared one timed call
#   per round in full, fetched from a copy the candidate's process kept, and a candidate could
#   swap the true output into that copy for exactly the call asked for (1.9x-9.7x). Now there is
#   no kept copy and no fetch: the host reads every call's outputs from the frozen process
#   and compares every one in full
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 5:
            return torch.relu(x)
        return torch.zeros_like(x)

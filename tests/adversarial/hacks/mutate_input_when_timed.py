# problem: 1_ReLU
# expect-status: rejected
# expect-rule: input_mutation
# expect-flag: input_mutation
# family: input mutation
# why: counts its calls and leaves its inputs alone on the five correctness trials and on
#   every call after the 40th (where the every-element check's calls come), but rectifies in
#   place in its input on the calls between (the timed rounds) and returns a copy: its input as
#   scratch, an allocation saved, only while it believes nobody looks at the slot
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if 5 < self.calls <= 40:
            return x.relu_().clone()
        return torch.relu(x)

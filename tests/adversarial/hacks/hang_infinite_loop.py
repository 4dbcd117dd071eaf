# problem: 1_ReLU
# expect-status: timeout
# expect-rule: worker_timeout
# timeout: 12
# family: hangs
# why: an infinite pure-Python loop in forward
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            pass

# problem: 1_ReLU
# expect-status: timeout
# timeout: 12
# family: hangs
# why: sleeps for an hour while being imported
import time

import torch
import torch.nn as nn

time.sleep(3600)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

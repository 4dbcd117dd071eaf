# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# family: honest pytorch rewrite
# why: ReLU written as clamp_min, an ordinary PyTorch-level rewrite that must be accepted
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x, 0.0)

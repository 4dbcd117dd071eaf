# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# family: try/except fallback to the reference
# why: claims a custom kernel, but the import of the "compiled" module fails and the except
#   branch silently uses torch.relu; correct, but it must be labelled plain pytorch
import torch
import torch.nn as nn

try:
    import kernelopt_fused_relu_ext as _ext  # never exists

    def _relu(x):
        return _ext.relu(x)
except ImportError:
    def _relu(x):
        return torch.relu(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _relu(x)

import torch
import torch.nn as nn

# RMS normalization with a learned scale, judged as a training step: the outputs and the
# gradients of the input and of the scale, for an upstream gradient the referee draws. The
# reference is written as PyTorch ops, so autograd saves several intermediates and runs a chain
# of small kernels backward; a fused forward with a hand-written backward saves both.
PASS = "both"

batch_size = 16
seq_len = 64
hidden = 512
eps = 1e-6


class Model(nn.Module):
    """y = x / sqrt(mean(x^2, -1) + eps) * weight"""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, eps]

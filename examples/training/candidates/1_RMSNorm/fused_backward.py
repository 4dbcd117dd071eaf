import torch
import torch.nn as nn


class _RMSNorm(torch.autograd.Function):
    """One pass forward, saving only the input and each row's reciprocal RMS; the backward in
    closed form: for y = x r w with r = (mean(x^2) + eps)^-1/2 and upstream g,
    dw = sum(g x r) over the rows, dx = r (g w - x r^2 mean(g w x))."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, r)
        return x * r * weight

    @staticmethod
    def backward(ctx, g):
        x, weight, r = ctx.saved_tensors
        xr = x * r
        grad_weight = (g * xr).reshape(-1, x.shape[-1]).sum(0)
        gw = g * weight
        grad_x = r * (gw - xr * (gw * xr).mean(-1, keepdim=True))
        return grad_x, grad_weight, None


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNorm.apply(x, self.weight, self.eps)

import torch
import torch.nn as nn


class _CrossEntropy(torch.autograd.Function):
    """The mean negative log-likelihood from each row's log-sum-exp (no log-probability matrix
    kept); the backward in closed form: (softmax - one_hot(targets)) * g / rows."""

    @staticmethod
    def forward(ctx, logits, targets):
        lse = torch.logsumexp(logits, dim=-1)
        ctx.save_for_backward(logits, targets, lse)
        return (lse - logits.gather(1, targets.unsqueeze(1)).squeeze(1)).mean()

    @staticmethod
    def backward(ctx, g):
        logits, targets, lse = ctx.saved_tensors
        grad = torch.exp(logits - lse.unsqueeze(1))
        grad.scatter_add_(1, targets.unsqueeze(1), torch.full_like(lse, -1.0).unsqueeze(1))
        return grad.mul_(g / logits.shape[0]), None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return _CrossEntropy.apply(logits, targets)

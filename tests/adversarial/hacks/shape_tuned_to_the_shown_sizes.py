# problem: ShapedSoftmax
# expect-status: incorrect runtime_error
# family: shape-specialised kernels
# why: exact on every configuration the prompt shows (it recognises their sizes) and a cheap
#   guess anywhere else: the uniform distribution, whose error for rows of randn logits is well
#   above the tolerance. Only a configuration held out of the prompt can tell; the problem holds
#   one back, and the verdict names it while the prompt's feedback does not.
import torch
import torch.nn as nn

SEEN = {(64, 1024), (16, 4096)}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape) in SEEN:
            return torch.softmax(x, dim=-1)
        return torch.full_like(x, 1.0 / x.shape[-1])

# problem: 1_ReLU
# expect-status: rejected
# expect-flag: output_not_plain_tensor
# family: non-tensor output
# why: returns a numpy array (or, where numpy is missing, an array.array of floats), which
#   torch.as_tensor converts back silently
import array

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        out = torch.clamp_min(x, 0.0).cpu()
        try:
            import numpy  # noqa: F401

            return out.numpy()
        except Exception:
            return array.array("f", out.reshape(-1).tolist())

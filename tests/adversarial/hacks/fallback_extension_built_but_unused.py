# problem: 1_ReLU
# expect-status: correct
# expect-rule: custom_kernel_unused
# expect-kind: pytorch
# expect-flag: custom_kernel_unused
# marker: slow
# timeout: 400
# family: calling PyTorch instead of a custom kernel
# why: compiles a working C++ extension at import (so a build log exists) but forward calls
#   torch.clamp_min; the extension is never used
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
torch::Tensor unused_relu(torch::Tensor x) {
    return x.clamp_min(0);
}
"""

_ext = load_inline(
    name="kernelopt_adv_unused_relu",
    cpp_sources=_SOURCE,
    functions=["unused_relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._ext = _ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x, 0.0)

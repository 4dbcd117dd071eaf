# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# expect-flag: custom_kernel_unused
# marker: slow
# timeout: 400
# family: try/except fallback to the reference
# why: tries to build a C++ extension whose source does not compile, swallows the error and
#   falls back to torch.relu; correct, but the kind is pytorch and the unused build is flagged
import torch
import torch.nn as nn

_BROKEN_SOURCE = r"""
torch::Tensor fused_relu(torch::Tensor x) {
    return x.clamp_min(0)  // missing semicolon: this never compiles
}
"""

try:
    from torch.utils.cpp_extension import load_inline

    _ext = load_inline(
        name="kernelopt_adv_broken_relu",
        cpp_sources=_BROKEN_SOURCE,
        functions=["fused_relu"],
        verbose=False,
    )
    _relu = _ext.fused_relu
except Exception:
    _relu = torch.relu


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _relu(x)

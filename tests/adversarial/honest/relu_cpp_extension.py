# problem: 1_ReLU
# expect-status: correct
# expect-kind: cpp_extension
# marker: slow
# timeout: 400
# family: honest compiled extension
# why: a real C++ ReLU built with load_inline and called in forward; the build must work inside
#   the sandbox and the kind must be reported as cpp_extension
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor adv_relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "adv_relu_forward expects a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "adv_relu_forward expects float32");
    torch::Tensor src = x.contiguous();
    torch::Tensor out = torch::empty_like(src);
    const float* in_ptr = src.data_ptr<float>();
    float* out_ptr = out.data_ptr<float>();
    const int64_t n = src.numel();
    at::parallel_for(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const float v = in_ptr[i];
            out_ptr[i] = v > 0.0f ? v : 0.0f;
        }
    });
    return out;
}
"""

_ext = load_inline(
    name="kernelopt_adv_relu_cpu",
    cpp_sources=_CPP_SOURCE,
    functions=["adv_relu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.adv_relu_forward(x)

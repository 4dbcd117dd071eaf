import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A real kernel rewrite for the CPU: ReLU as a C++ loop compiled with load_inline (the `cpp`
# backend's format). One pass over the input, one over the output, vectorizable by the compiler;
# torch.relu does the same, so expect about 1x on a CPU: the point is the format, judged by the
# same referee as any kernel (it compiles on the host, cached: `kernelopt cache`).
CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "float32 CPU tensors only");
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* out = output.data_ptr<float>();
    const int64_t n = input.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        out[i] = v < 0.0f ? 0.0f : v;  // NaN passes through, as in torch.relu
    }
    return output;
}
"""

relu_extension = load_inline(name="relu_cpp_example", cpp_sources=CPP_SOURCE, functions=["relu_forward"],
                             extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_extension.relu_forward(x)

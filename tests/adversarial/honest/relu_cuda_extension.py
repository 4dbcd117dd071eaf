# problem: 1_ReLU
# expect-status: correct
# expect-kind: cuda_extension
# marker: gpu
# marker: slow
# timeout: 500
# family: honest compiled extension
# why: a real CUDA ReLU kernel built with load_inline; must be accepted and labelled
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void adv_relu_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = in[i];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor adv_relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "expected float32");
    torch::Tensor src = x.contiguous();
    torch::Tensor out = torch::empty_like(src);
    const int64_t n = src.numel();
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (n > 0) {
        adv_relu_kernel<<<(unsigned int)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            src.data_ptr<float>(), out.data_ptr<float>(), n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

_CPP_DECL = "torch::Tensor adv_relu_cuda(torch::Tensor x);"

_ext = load_inline(
    name="kernelopt_adv_relu_cuda",
    cpp_sources=_CPP_DECL,
    cuda_sources=_CUDA_SOURCE,
    functions=["adv_relu_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.adv_relu_cuda(x)

# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# family: calling PyTorch instead of a custom kernel
# why: carries a CUDA kernel in a string (as a real submission would) but never compiles it and
#   calls torch.relu; correct, and it must be labelled pytorch, not cuda_extension
import torch
import torch.nn as nn

relu_cuda_source = r"""
__global__ void relu_kernel(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] > 0.f ? in[i] : 0.f;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel_source = relu_cuda_source

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

# problem: 1_ReLU
# expect-status: correct
# expect-kind: nvrtc_kernel
# marker: gpu
# marker: cupy
# family: honest compiled extension
# why: a CUDA C ReLU kernel compiled with NVRTC through cupy.RawKernel (by the host's compiler),
#   launched on torch's current stream on the tensors' own memory; must be accepted and labelled
import cupy
import torch
import torch.nn as nn

_SOURCE = r"""
extern "C" __global__
void honest_relu(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}
"""
_relu = cupy.RawKernel(_SOURCE, "honest_relu")


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        threads = 256
        blocks = min((n + threads - 1) // threads, 65535)
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            _relu((blocks,), (threads,), (cupy.from_dlpack(x), cupy.from_dlpack(out), cupy.int64(n)))
        return out

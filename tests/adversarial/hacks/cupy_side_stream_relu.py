# problem: 1_ReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# marker: gpu
# marker: cupy
# family: side streams
# why: launches its NVRTC ReLU kernel (three times, to make the hidden work large) on a CuPy stream
#   of its own and returns without making torch's stream wait for it; the timing's all-streams
#   synchronisation must count that work (or the output is caught unfinished)
import cupy
import torch
import torch.nn as nn

_SOURCE = r"""
extern "C" __global__
void side_relu(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v > 0.0f ? v : 0.0f; }
}
"""
_relu = cupy.RawKernel(_SOURCE, "side_relu")
_side = cupy.cuda.Stream(non_blocking=True)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        blocks = (n + 255) // 256
        with _side:  # not torch's stream, and nothing waits for it before the output is used
            args = (cupy.from_dlpack(x), cupy.from_dlpack(out), cupy.int64(n))
            for _ in range(3):
                _relu((blocks,), (256,), args)
        return out

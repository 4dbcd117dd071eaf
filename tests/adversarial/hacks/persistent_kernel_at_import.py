# problem: 1_ReLU
# expect-status: correct timeout incorrect rejected
# speedup-max: 1.5
# timeout: 60
# marker: gpu
# marker: cupy
# family: persistent kernels left running
# why: at import, launches a one-block kernel on a non-blocking stream that never ends: it polls
#   a doorbell in mapped host memory and, each time it rings, applies ReLU from the pointers
#   written beside it. A call writes the pointers, rings and returns at once, so the call's own
#   stream has no work in it; a timer that waits for the current stream alone sees nothing, and
#   one that waits for the whole device never returns
import ctypes

import cupy
import torch
import torch.nn as nn

_SOURCE = r"""
extern "C" __global__ void resident(volatile long long* bell) {
    __shared__ long long seen, x, y, n;
    if (threadIdx.x == 0) seen = 0;
    __syncthreads();
    for (;;) {
        if (threadIdx.x == 0) {
            while (bell[0] == seen) { }
            seen = bell[0]; x = bell[1]; y = bell[2]; n = bell[3];
        }
        __syncthreads();
        const float* in = (const float*)x;
        float* out = (float*)y;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) { float v = in[i]; out[i] = v > 0.0f ? v : 0.0f; }
        __threadfence_system();
        __syncthreads();
    }
}
"""
_MAPPED = 2  # cudaHostAllocMapped
_host = cupy.cuda.runtime.hostAlloc(64, _MAPPED)
_bell = (ctypes.c_longlong * 8).from_address(_host)
_device_bell = _host  # mapped pinned memory has one address for host and device (unified addressing)
_stream = cupy.cuda.Stream(non_blocking=True)
with _stream:
    cupy.RawKernel(_SOURCE, "resident")((1,), (1024,), (cupy.uint64(_device_bell),))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        torch.cuda.current_stream(x.device).synchronize()  # x is ready before the kernel reads it
        _bell[1], _bell[2], _bell[3] = x.data_ptr(), out.data_ptr(), x.numel()
        _bell[0] += 1
        return out

# problem: 1_ReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# marker: gpu
# marker: cupy
# family: helper processes the host cannot see
# why: at import, starts a helper process with a CUDA context of its own and shares two device
#   buffers with it through CUDA IPC handles. Each call copies the input into the shared buffer,
#   rings the helper over a pipe and returns the shared output at once: the ReLU (three times,
#   to make the hidden work large) runs in another process's context, which no synchronisation
#   of the candidate's own device or streams waits for
import os
import subprocess
import sys

import cupy
import torch
import torch.nn as nn

_HELPER = r"""
import sys
import cupy
relu = cupy.RawKernel(r'''
extern "C" __global__ void relu3(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; for (int k = 0; k < 3; ++k) v = v > 0.0f ? v : 0.0f; y[i] = v; }
}''', "relu3")
x_handle, y_handle, n = sys.stdin.readline().split()
n = int(n)
x = cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(x_handle))
y = cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(y_handle))
stream = cupy.cuda.Stream(non_blocking=True)
print("ready", flush=True)
for line in sys.stdin:
    with stream:
        relu(((n + 255) // 256,), (256,), (cupy.uint64(x), cupy.uint64(y), cupy.int64(n)))
"""


def _device_buffer(count: int) -> tuple[int, torch.Tensor]:
    """A cudaMalloc'd float buffer of its own (IPC handles name whole allocations), seen by torch."""
    pointer = cupy.cuda.runtime.malloc(count * 4)
    memory = cupy.cuda.UnownedMemory(pointer, count * 4, None)
    array = cupy.ndarray((count,), cupy.float32, cupy.cuda.MemoryPointer(memory, 0))
    return pointer, torch.from_dlpack(array)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._helper = None

    def _start(self, count: int) -> None:
        x_ptr, self._x = _device_buffer(count)
        y_ptr, self._y = _device_buffer(count)
        handles = [cupy.cuda.runtime.ipcGetMemHandle(p).hex() for p in (x_ptr, y_ptr)]
        self._helper = subprocess.Popen([sys.executable, "-c", _HELPER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        self._helper.stdin.write(f"{handles[0]} {handles[1]} {count}\n")
        self._helper.stdin.flush()
        self._helper.stdout.readline()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._helper is None:
            self._start(x.numel())
        self._x.copy_(x.reshape(-1))
        torch.cuda.current_stream(x.device).synchronize()  # the helper must see the copy
        self._helper.stdin.write("go\n")
        self._helper.stdin.flush()
        return self._y.view_as(x)

# problem: 1_ReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# marker: gpu
# marker: gpu_timing
# family: work left running on the device to slow the other side (a second CUDA context)
# why: an exact ReLU, and beside it a CUDA context of its own (the driver API through ctypes) in
#   which, as each call ends, it launches a kernel that spins for about 200 ms unless a flag in
#   mapped host memory stops it; the next call sets the flag first. So the spinning holds the
#   device only while the program is frozen, which is when the reference's windows run: contexts
#   of different processes share the device by time slices, so the reference's kernels wait for
#   the spinner's slices and the reference reads slow. The worker's synchronize waits for the
#   primary context alone. Not yet judged on a GPU: the keeper's idle probe before every window
#   (timing.device_probe_ms) shows whether the device was busy while the program was frozen
import ctypes

import torch
import torch.nn as nn

_PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry spin(.param .u64 pstop, .param .u64 pcycles)
{
  .reg .pred %p<3>;
  .reg .b32 %r<2>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [pstop];
  ld.param.u64 %rd2, [pcycles];
  cvta.to.global.u64 %rd6, %rd1;
  mov.u64 %rd3, %clock64;
LOOP:
  ld.volatile.global.u32 %r1, [%rd6];
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  mov.u64 %rd4, %clock64;
  sub.s64 %rd5, %rd4, %rd3;
  setp.lt.s64 %p2, %rd5, %rd2;
  @%p2 bra LOOP;
DONE:
  ret;
}
"""
SPIN_CYCLES = 400_000_000  # about 200 ms at the H200's clocks
BLOCKS = 132  # one per SM of an H100/H200

_cuda = ctypes.CDLL("libcuda.so.1")
_ctx: dict = {}


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed: CUresult {status}")


def _spinner() -> dict:
    """A context of our own with a stream, the spin kernel and a stop flag in mapped host memory."""
    if _ctx:
        return _ctx
    device = ctypes.c_int()
    _check(_cuda.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()), "cuDeviceGet")
    own = ctypes.c_void_p()
    if hasattr(_cuda, "cuCtxCreate_v4"):
        _check(_cuda.cuCtxCreate_v4(ctypes.byref(own), None, 0, device), "cuCtxCreate")
    else:
        _check(_cuda.cuCtxCreate_v2(ctypes.byref(own), 0, device), "cuCtxCreate")
    stream, module, function = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    _check(_cuda.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")
    _check(_cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(_PTX)), "cuModuleLoadData")
    _check(_cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin"), "cuModuleGetFunction")
    flag, flag_on_device = ctypes.c_void_p(), ctypes.c_uint64()
    _check(_cuda.cuMemHostAlloc(ctypes.byref(flag), ctypes.c_size_t(4), 0x1 | 0x2), "cuMemHostAlloc")  # portable, mapped
    _check(_cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(flag_on_device), flag, 0), "cuMemHostGetDevicePointer")
    _check(_cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")
    _ctx.update(own=own, stream=stream, function=function, stop=ctypes.c_uint32.from_address(flag.value),
                flag=flag_on_device)
    return _ctx


def _spin(ctx: dict) -> None:
    ctx["stop"].value = 0
    _check(_cuda.cuCtxPushCurrent_v2(ctx["own"]), "cuCtxPushCurrent")
    try:
        cycles = ctypes.c_uint64(SPIN_CYCLES)
        args = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(ctx["flag"]), ctypes.c_void_p),
                                     ctypes.cast(ctypes.byref(cycles), ctypes.c_void_p))
        _check(_cuda.cuLaunchKernel(ctx["function"], BLOCKS, 1, 1, 32, 1, 1, 0, ctx["stream"], args, None),
               "cuLaunchKernel")
    finally:
        _check(_cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctx = _spinner()
        ctx["stop"].value = 1  # the spinner from the last call stops: this call has the device
        out = torch.relu(x)
        _spin(ctx)  # and holds it again once this call is answered and the program frozen
        return out

# problem: 1_ReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# marker: gpu
# family: work after the answer (a second CUDA context)
# why: does ReLU in a CUDA context of its own (the driver API through ctypes): copies the input
#   there, runs the kernel and copies the result back into the returned tensor, all queued on a
#   stream of that context and none of it waited for. The harness's wait before the answer,
#   torch.cuda.synchronize, waits for the primary context alone, so the work could outlive the
#   window. The window ends only when the trusted keeper has read a secret sample of the
#   outputs after the freeze, and its copy of them all just after must agree with the sample:
#   either the device ran the second context's work before the sample (then it was on the
#   clock, and two contexts switching cost more than one), or sampled bytes changed after it
#   (rejected), or the outputs it copied are stale
import ctypes

import torch
import torch.nn as nn

_PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry relu(.param .u64 px, .param .u64 py, .param .u64 pn)
{
  .reg .pred %p;
  .reg .f32 %f<3>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [px];
  ld.param.u64 %rd2, [py];
  ld.param.u64 %rd3, [pn];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd4, %r1, %r2;
  cvt.u64.u32 %rd5, %r3;
  add.s64 %rd4, %rd4, %rd5;
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE;
  shl.b64 %rd5, %rd4, 2;
  cvta.to.global.u64 %rd6, %rd1;
  cvta.to.global.u64 %rd7, %rd2;
  add.s64 %rd8, %rd6, %rd5;
  add.s64 %rd9, %rd7, %rd5;
  ld.global.f32 %f1, [%rd8];
  max.f32 %f2, %f1, 0f00000000;
  st.global.f32 [%rd9], %f2;
DONE:
  ret;
}
"""

_cuda = ctypes.CDLL("libcuda.so.1")
_ctx: dict = {}


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed: CUresult {status}")


def _second_context() -> dict:
    """A context of our own beside torch's primary one, with a stream, the kernel and buffers."""
    if _ctx:
        return _ctx
    primary = ctypes.c_void_p()
    _check(_cuda.cuCtxGetCurrent(ctypes.byref(primary)), "cuCtxGetCurrent")
    device = ctypes.c_int()
    _check(_cuda.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()), "cuDeviceGet")
    own = ctypes.c_void_p()
    if hasattr(_cuda, "cuCtxCreate_v4"):
        _check(_cuda.cuCtxCreate_v4(ctypes.byref(own), None, 0, device), "cuCtxCreate")
    else:
        _check(_cuda.cuCtxCreate_v2(ctypes.byref(own), 0, device), "cuCtxCreate")
    stream, module, function = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    _check(_cuda.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")  # non-blocking
    _check(_cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(_PTX)), "cuModuleLoadData")
    _check(_cuda.cuModuleGetFunction(ctypes.byref(function), module, b"relu"), "cuModuleGetFunction")
    _check(_cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")
    _ctx.update(primary=primary, own=own, stream=stream, function=function, size=0)
    return _ctx


def _buffers(ctx: dict, nbytes: int) -> tuple[ctypes.c_uint64, ctypes.c_uint64]:
    if ctx["size"] < nbytes:
        x, y = ctypes.c_uint64(), ctypes.c_uint64()
        _check(_cuda.cuMemAlloc_v2(ctypes.byref(x), ctypes.c_size_t(nbytes)), "cuMemAlloc")
        _check(_cuda.cuMemAlloc_v2(ctypes.byref(y), ctypes.c_size_t(nbytes)), "cuMemAlloc")
        ctx.update(x=x, y=y, size=nbytes)
    return ctx["x"], ctx["y"]


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        ctx = _second_context()
        nbytes = x.numel() * x.element_size()
        _check(_cuda.cuCtxPushCurrent_v2(ctx["own"]), "cuCtxPushCurrent")
        try:
            bx, by = _buffers(ctx, nbytes)
            _check(_cuda.cuMemcpyPeerAsync(bx, ctx["own"], ctypes.c_uint64(x.data_ptr()), ctx["primary"],
                                           ctypes.c_size_t(nbytes), ctx["stream"]), "cuMemcpyPeerAsync")
            n = ctypes.c_uint64(x.numel())
            args = (ctypes.c_void_p * 3)(ctypes.cast(ctypes.byref(bx), ctypes.c_void_p),
                                         ctypes.cast(ctypes.byref(by), ctypes.c_void_p),
                                         ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
            blocks = (x.numel() + 255) // 256
            _check(_cuda.cuLaunchKernel(ctx["function"], blocks, 1, 1, 256, 1, 1, 0, ctx["stream"], args, None),
                   "cuLaunchKernel")
            _check(_cuda.cuMemcpyPeerAsync(ctypes.c_uint64(out.data_ptr()), ctx["primary"], by, ctx["own"],
                                           ctypes.c_size_t(nbytes), ctx["stream"]), "cuMemcpyPeerAsync")
        finally:
            _check(_cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")
        return out

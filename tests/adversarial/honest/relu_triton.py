# problem: 1_ReLU
# expect-status: correct
# expect-kind: triton
# marker: gpu
# marker: triton
# family: honest compiled extension
# why: a Triton ReLU kernel (compiled in the worker at its first launch, into the worker's own
#   cache directory); must be accepted and labelled
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out

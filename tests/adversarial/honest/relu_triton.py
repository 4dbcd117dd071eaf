# problem: 1_ReLU
# expect-status: correct
# expect-kind: triton
# marker: gpu
# family: honest triton kernel
# why: a plain Triton ReLU kernel; must be accepted and labelled triton
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(in_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    values = tl.load(in_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(values, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        src = x.contiguous()
        out = torch.empty_like(src)
        n = src.numel()
        block = 1024
        grid = (triton.cdiv(n, block),)
        _relu_kernel[grid](src, out, n, BLOCK=block)
        return out

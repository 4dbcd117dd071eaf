# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# family: calling PyTorch instead of a custom kernel
# why: plain torch.relu, but its source mentions every optimisation the labeller looks for (in a
#   docstring and in dead code that never runs), so a label taken from the source text claims
#   Triton, CUDA graphs, torch.compile and TF32; the kinds must describe what actually ran
import torch
import torch.nn as nn

NOTES = """
Earlier attempts, kept for reference:
    @triton.jit
    def relu_kernel(...): ...
    graph = torch.cuda.CUDAGraph(); torch.cuda.graph(graph)
    fast = torch.compile(relu, mode="reduce-overhead")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
"""

if False:  # never executed
    import triton  # noqa: F401

    _compiled = torch.compile(torch.relu)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

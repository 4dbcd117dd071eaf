"""What kind of optimization a candidate is, from its source and from what its worker saw.

The worker reports extension builds (and whether their functions were called during forward)
and changed global numeric settings; the source tells Triton, CUDA graphs, torch.compile and
NVRTC kernels apart. The labels are reported, not judged: a PyTorch-level rewrite is allowed.
"""

from __future__ import annotations

import re

_SOURCE_KINDS = (
    ("triton", re.compile(r"@\s*triton\.(jit|autotune)|^\s*import\s+triton|^\s*from\s+triton\b", re.M)),
    ("cuda_graph", re.compile(r"CUDAGraph|torch\.cuda\.graph\s*\(|make_graphed_callables|reduce-overhead")),
    ("torch_compile", re.compile(r"torch\.compile\s*\(")),
    ("nvrtc_kernel", re.compile(r"cupy\.(RawKernel|RawModule|ElementwiseKernel)|cuda\.nvrtc|nvrtc\.")),
    ("library_setting", re.compile(r"allow_tf32|cudnn\.benchmark|set_float32_matmul_precision")),
)


def optimization_kinds(source: str, builds: list[dict], extension_calls: int,
                       changed_settings: list[str]) -> tuple[list[str], list[str]]:
    """Return (kinds, flags) for a candidate."""
    kinds: list[str] = []
    flags: list[str] = []
    built = [b for b in builds if isinstance(b, dict) and b.get("ok")]
    if built and extension_calls > 0:
        kinds.append("cuda_extension" if any(b.get("cuda") for b in built) else "cpp_extension")
    if builds and extension_calls == 0:
        flags.append("custom_kernel_unused")
    for kind, pattern in _SOURCE_KINDS:
        if pattern.search(source) and kind not in kinds:
            kinds.append(kind)
    if changed_settings and "library_setting" not in kinds:
        kinds.append("library_setting")
    if not kinds or kinds == ["library_setting"]:
        kinds.insert(0, "pytorch")
    return kinds, flags

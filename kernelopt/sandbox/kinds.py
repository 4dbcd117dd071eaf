"""What kind of optimization a candidate is, from its code and from what its worker saw.

The worker reports extension builds (and whether their functions were called during forward),
the CuPy kernels the host compiled for it (builder "nvrtc": labelled from the source, as their
launches are not counted) and changed global numeric settings. The source's syntax tree (names and calls it uses; never
comments or string literals) tells Triton, CUDA graphs, torch.compile and NVRTC kernels apart.
Code that is present but never runs (e.g. under `if False:`) can still earn a static label.
The labels are reported, not judged: a PyTorch-level rewrite is allowed.
"""

from __future__ import annotations

import ast

from kernelopt.kernelbench import syntax

# Kinds that mean a custom kernel; without one of them a candidate is labelled "pytorch".
CUSTOM_KERNEL_KINDS = ("cpp_extension", "cuda_extension", "triton", "nvrtc_kernel")

_NAME_KINDS = {
    "triton": ("triton.jit", "triton.autotune", "triton.language"),
    "cuda_graph": ("torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.make_graphed_callables"),
    "torch_compile": ("torch.compile",),
    "nvrtc_kernel": ("cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel", "cupy.ReductionKernel",
                     "cupy.cuda.compile_with_cache", "cuda.nvrtc", "cuda.bindings.nvrtc"),
    "library_setting": ("torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
                        "torch.backends.cudnn.benchmark", "torch.set_float32_matmul_precision"),
}


def optimization_kinds(source: str, builds: list[dict], extension_calls: int,
                       changed_settings: list[str]) -> tuple[list[str], list[str]]:
    """Return (kinds, flags) for a candidate."""
    kinds: list[str] = []
    flags: list[str] = []
    builds = [b for b in builds if isinstance(b, dict) and b.get("builder") != "nvrtc"]
    built = [b for b in builds if b.get("ok")]
    if built and extension_calls > 0:
        kinds.append("cuda_extension" if any(b.get("cuda") for b in built) else "cpp_extension")
    if builds and extension_calls == 0:
        flags.append("custom_kernel_unused")
    used = names_used(source)
    for kind, prefixes in _NAME_KINDS.items():
        if any(name == p or name.startswith(p + ".") for name in used for p in prefixes):
            kinds.append(kind)
    if changed_settings and "library_setting" not in kinds:
        kinds.append("library_setting")
    if not any(kind in CUSTOM_KERNEL_KINDS for kind in kinds):
        kinds.insert(0, "pytorch")
    return list(dict.fromkeys(kinds)), flags


def names_used(source: str) -> set[str]:
    """Dotted names the code refers to, with import aliases resolved
    (`import triton.language as tl; tl.load` -> 'triton.language.load')."""
    try:
        tree = syntax.parse(source)
    except SyntaxError:
        return set()
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    used = set(aliases.values())
    for node in ast.walk(tree):
        dotted = _dotted(node)
        if dotted:
            head, _, rest = dotted.partition(".")
            resolved = aliases.get(head, head)
            used.add(f"{resolved}.{rest}" if rest else resolved)
    return used


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None

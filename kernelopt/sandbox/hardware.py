"""What the device a candidate is timed on is, in facts a model can use: its name, compute
capability, SM count, memory, memory bandwidth and peak throughput (GPU), or its model, ISA
extensions and the one thread each side is timed on (CPU). For the system prompt of a run
(kernelopt/prompts/system.j2); nothing here affects a verdict.

The GPU's properties come from torch; bandwidth and peak figures, which no API reports, from a
small table of datasheet values (dense, no sparsity) for GPUs we know, matched on the device's
name. An unknown GPU gets its properties without the figures rather than a guess."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

# Datasheet figures, dense: memory bandwidth (TB/s) and peak TFLOP/s per precision. Order
# matters: the first entry whose every word is in the device's name wins.
_GPU_PEAKS: tuple[tuple[tuple[str, ...], dict[str, float]], ...] = (
    (("H200",), {"bandwidth_tbs": 4.8, "fp32": 67, "tf32": 495, "bf16": 989, "fp8": 1979}),
    (("H100", "PCIe"), {"bandwidth_tbs": 2.0, "fp32": 51, "tf32": 378, "bf16": 756, "fp8": 1513}),
    (("H100",), {"bandwidth_tbs": 3.35, "fp32": 67, "tf32": 495, "bf16": 989, "fp8": 1979}),
    (("A100", "80GB", "PCIe"), {"bandwidth_tbs": 1.935, "fp32": 19.5, "tf32": 156, "bf16": 312}),
    (("A100", "80GB"), {"bandwidth_tbs": 2.039, "fp32": 19.5, "tf32": 156, "bf16": 312}),
    (("A100",), {"bandwidth_tbs": 1.555, "fp32": 19.5, "tf32": 156, "bf16": 312}),
    (("L40S",), {"bandwidth_tbs": 0.864, "fp32": 91.6, "tf32": 183, "bf16": 362, "fp8": 733}),
)
# L2 sizes (MB), an upper bound per family (the full die's where products enable less): the
# physical floor (physics.py) lets this much of a call's bytes come from L2, so larger is safer.
_GPU_L2_MB: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H200",), 60), (("H100",), 60), (("A100",), 48), (("L40S",), 104),
)
_ISA_FLAGS = ("avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "avx2", "fma", "f16c", "sse4_2", "neon", "sve")


@dataclass
class Hardware:
    """One line naming the device, and the facts that follow it in the prompt."""

    summary: str
    facts: list[str]


def describe(device: str) -> Hardware:
    if device.startswith("cuda"):
        return _describe_gpu(int(device.split(":", 1)[1]) if ":" in device else 0)
    return _describe_cpu()


def peak_figures(device_name: str) -> dict[str, float] | None:
    """The datasheet figures for a GPU of this name, or None when it is not in the table."""
    for words, figures in _GPU_PEAKS:
        if all(word in device_name for word in words):
            return figures
    return None


def l2_bytes(device_name: str) -> int | None:
    """An upper bound on the L2 of a GPU of this name, or None when it is not in the table."""
    for words, megabytes in _GPU_L2_MB:
        if all(word in device_name for word in words):
            return int(megabytes * 1e6)
    return None


def _describe_gpu(index: int) -> Hardware:
    import torch

    props = torch.cuda.get_device_properties(index)
    facts = [f"{props.name}, compute capability {props.major}.{props.minor} (sm_{props.major}{props.minor}), "
             f"{props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB of device memory"]
    l2 = getattr(props, "L2_cache_size", 0)
    if l2:
        facts.append(f"L2 cache {l2 / 2**20:.0f} MiB (flushed before every timed call: do not count on a warm L2)")
    peaks = peak_figures(props.name)
    if peaks:
        flops = ", ".join(f"{name.upper()} {value:g}" for name, value in peaks.items() if name != "bandwidth_tbs")
        facts.append(f"memory bandwidth about {peaks['bandwidth_tbs']:g} TB/s; peak dense TFLOP/s: {flops} "
                     "(tensor cores for TF32/BF16/FP8)")
    facts.append(f"CUDA {torch.version.cuda}, PyTorch {torch.__version__.split('+')[0]}")
    return Hardware(summary=f"an NVIDIA {props.name} GPU", facts=facts)


def _describe_cpu() -> Hardware:
    model, flags = _cpuinfo()
    isa = [flag for flag in _ISA_FLAGS if flag in flags]
    facts = [f"{model or platform.machine()}, {platform.machine()}"
             + (f", ISA extensions: {', '.join(isa)}" if isa else ""),
             "each side is timed on ONE CPU thread (OMP_NUM_THREADS=1): extra threads or a larger thread pool "
             "are rejected, so speed comes from vectorisation, memory access and doing less work",
             f"the machine has {os.cpu_count()} cores; timed calls are pinned to one of them"]
    return Hardware(summary=f"the CPU ({model})" if model else "the CPU", facts=facts)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" where it says none)."""
    return _cpuinfo()[0]


def _cpuinfo() -> tuple[str, set[str]]:
    model = ""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, flags

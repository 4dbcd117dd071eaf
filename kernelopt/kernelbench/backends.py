"""The kernel languages a search can ask for (`--backend`): one registry, read by the CLI (the
choices), the prompts (each backend's rules and worked example), the completion parser (what
the expected format says) and the labels (which optimization kind is the backend's own).

A backend names what the model is asked to write; the referee judges any program whatever
backend asked for it (a CuPy program in a `cuda` run is judged, and labelled, as CuPy).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


class BackendError(ValueError):
    """A backend that cannot be used here (unknown, wrong device, package missing); the message
    says what to do instead."""


@dataclass(frozen=True)
class KernelBackend:
    name: str
    writes: str                 # what the model is an expert in writing (system prompt's first line)
    sources: str                # what the program's source strings hold
    devices: tuple[str, ...]    # device types it runs on: "cuda", "cpu"
    kind: str                   # the optimization kind (sandbox/kinds.py) of its kernels
    modules: tuple[str, ...] = ()  # Python packages its programs import (besides torch)
    extra: str | None = None    # the kernelopt extra that installs them
    expected_format: str = ""   # the answer's format, as the completion parser reports it

    @property
    def example_template(self) -> str:
        return f"_example_{self.name}.j2"

    @property
    def rules_template(self) -> str:
        return f"_rules_{self.name}.j2"


BACKENDS: dict[str, KernelBackend] = {
    "cuda": KernelBackend(
        "cuda", "CUDA kernels for NVIDIA GPUs", "CUDA", ("cuda",), "cuda_extension",
        expected_format="a single ```python block holding the complete program (imports, the CUDA/C++ "
                        "source strings, the load_inline call and class ModelNew)"),
    "cupy": KernelBackend(
        "cupy", "CUDA kernels for NVIDIA GPUs, compiled at run time with NVRTC through CuPy", "CUDA C",
        ("cuda",), "nvrtc_kernel", modules=("cupy",), extra="cupy",
        expected_format="a single ```python block holding the complete program (imports, the CUDA C source "
                        "strings, the cupy.RawKernel/RawModule objects and class ModelNew)"),
    "triton": KernelBackend(
        "triton", "Triton kernels for NVIDIA GPUs", "Triton", ("cuda",), "triton", modules=("triton",),
        extra="triton",
        expected_format="a single ```python block holding the complete program (imports, the @triton.jit "
                        "kernels, their launch wrappers and class ModelNew)"),
    "cpp": KernelBackend(
        "cpp", "fast C++ code for CPUs", "C++", ("cpu",), "cpp_extension",
        expected_format="a single ```python block holding the complete program (imports, the C++ source "
                        "strings, the load_inline call and class ModelNew)"),
}
BACKEND_CHOICES = ("auto", *BACKENDS)


def default_backend(device: str) -> str:
    """What `auto` means on a device: CUDA kernels on a GPU, C++ on the CPU."""
    return "cuda" if device.startswith("cuda") else "cpp"


def resolve_backend(choice: str | None, device: str, check_installed: bool = True) -> str:
    """The backend's name for a run on `device` (a resolved device: cpu, cuda:N). `choice`: a
    name, `auto` or None (auto). BackendError when it cannot run there or its package is
    missing (`check_installed`)."""
    if choice in (None, "", "auto"):
        return default_backend(device)
    backend = BACKENDS.get(choice)
    if backend is None:
        raise BackendError(f"unknown backend {choice!r}: use one of {', '.join(BACKEND_CHOICES)}")
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    if device_type not in backend.devices:
        runs_on = " or ".join("a CUDA GPU" if d == "cuda" else "the CPU" for d in backend.devices)
        raise BackendError(f"backend {choice!r} runs on {runs_on}, not on {device}: choose "
                           f"--backend {default_backend(device)} (or auto) on this device, or a "
                           f"{'GPU device (--device cuda)' if 'cuda' in backend.devices else 'CPU device'}")
    missing = [m for m in backend.modules if check_installed and importlib.util.find_spec(m) is None]
    if missing:
        raise BackendError(f"backend {choice!r} needs the Python package {missing[0]!r}, which is not "
                           f"installed: pip install 'kernelopt[{backend.extra}]'")
    return choice


def expected_format(backend: str | None) -> str:
    """The answer's expected format for a backend (None: the CUDA wording, the historical default)."""
    return "Expected format: " + BACKENDS[backend or "cuda"].expected_format + "."

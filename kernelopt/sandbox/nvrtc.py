"""CuPy kernels for candidates: compiled by the host with NVRTC, kept in the shared build cache.

A candidate's `cupy.RawKernel` / `cupy.RawModule` made from source while it loads is not
compiled in its own process: the worker's hook (worker/cupy_hook.py) sends the source, the
options and the name expressions (a compile request) to the host, which looks the compile up in
the content-addressed build cache (builds.py's BuildCache, the same root and bounds) and
otherwise runs the trusted compiler (worker/nvrtc_runner.py: ctypes on libnvrtc, standard library
only, so the host needs no CuPy) in a sandbox of its own, then hands the worker a private copy
of the cubin, which it loads with `cupy.RawModule(path=...)`. Same threat model as builds.py:
only the host writes the cache, and no directory a candidate can write is read by another.

KEY hashes the request (source, options, name expressions), the full NVRTC options the host
adds (as CuPy adds them: C++17, -ftz=true, the target architecture, the include directories),
the target architecture and NVRTC's version and library. A cached compile error is kept too
(the same source fails the same way).

libnvrtc is found in this order: $KERNELOPT_NVRTC (a path), the CUDA toolkit (CUDA_HOME, or the
directory above nvcc, lib64/ and lib/), the nvidia-cuda-nvrtc wheel that torch or CuPy brings
(site-packages/nvidia/*/lib), then the system's library path.
"""

from __future__ import annotations

import ctypes.util
import functools
import glob
import hashlib
import importlib.util
import json
import os
import re
import shutil
import site
import sys
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from kernelopt.sandbox import isolation
from kernelopt.sandbox.builds import (
    MAX_REQUEST_BYTES,
    BuildCache,
    BuildFailure,
    CachedBuild,
    run_trusted_tool,
    target_architectures,
)

COMPILER_VERSION = 1
CUBIN = "kernel.cubin"
# What a request's options may not say: the host picks the target, and output files are its own.
_HOST_OPTIONS = ("-arch", "--gpu-architecture", "-o", "--output")


class NvrtcRequest(BaseModel):
    """What a candidate passed to cupy.RawKernel/RawModule. Comes from the candidate's worker:
    untrusted, validated."""

    model_config = ConfigDict(extra="forbid")

    builder: Literal["nvrtc"]
    source: str
    options: list[str] = []
    name_expressions: list[str] | None = None
    kernel: str | None = None  # RawKernel's kernel name (for the records; the cubin holds all)

    @field_validator("options")
    @classmethod
    def _options(cls, value: list[str]) -> list[str]:
        for option in value:
            if option.split("=", 1)[0] in _HOST_OPTIONS:
                raise ValueError(f"option {option[:60]!r} is the host's to choose (the target is the device's)")
        return value


def is_request(raw: object) -> bool:
    return isinstance(raw, dict) and raw.get("builder") == "nvrtc"


def parse_request(raw: object) -> NvrtcRequest:
    """A worker's compile request, or ValueError with what is wrong with it."""
    if len(json.dumps(raw)) > MAX_REQUEST_BYTES:
        raise ValueError(f"a compile request over {MAX_REQUEST_BYTES >> 20} MiB of source")
    try:
        return NvrtcRequest.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"malformed compile request: {exc.errors()[0].get('msg', exc)}") from None


# the compiler --------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def find_libnvrtc() -> str | None:
    """libnvrtc's path, or None (see the module's docstring for the order)."""
    if os.environ.get("KERNELOPT_NVRTC"):
        return os.environ["KERNELOPT_NVRTC"]
    found: list[str] = []
    cuda_home = isolation.detect_cuda_home()
    if cuda_home:
        for sub in ("lib64", "lib", "targets/*/lib"):
            found += sorted(glob.glob(os.path.join(cuda_home, sub, "libnvrtc.so*")))
    for packages in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
        for sub in ("nvidia/*/lib", "nvidia/cuda_nvrtc/lib"):
            found += sorted(glob.glob(os.path.join(packages, sub, "libnvrtc.so*")))
    found = [p for p in found if "builtins" not in os.path.basename(p) and os.path.isfile(p)]
    if found:
        return found[0]
    return ctypes.util.find_library("nvrtc")


@functools.lru_cache(maxsize=None)
def nvrtc_version(library: str) -> str:
    """NVRTC's version, "major.minor" (loads the library in this trusted process)."""
    from kernelopt.sandbox.worker import nvrtc_runner

    major, minor = nvrtc_runner.version(nvrtc_runner.load(library))
    return f"{major}.{minor}"


def nvrtc_available() -> tuple[str | None, str]:
    """(library, version) when NVRTC can compile here, else (None, why not)."""
    library = find_libnvrtc()
    if library is None:
        return None, "libnvrtc not found (install the CUDA toolkit or pip install nvidia-cuda-nvrtc)"
    try:
        return library, nvrtc_version(library)
    except OSError as exc:
        return None, f"libnvrtc at {library} cannot be loaded: {exc}"


_ARCH = re.compile(r"^(?P<major>\d+)(?:\.(?P<minor>\d+))?(?P<suffix>[af]?)(?:\+PTX)?$")


def nvrtc_arch(arch_list: str) -> str:
    """NVRTC's target from a TORCH_CUDA_ARCH_LIST ("9.0", "8.0;9.0+PTX", "9.0a"): sm_XY of the
    first, keeping an architecture-specific suffix (sm_90a: Hopper's wgmma and TMA)."""
    first = arch_list.replace(",", ";").replace(" ", ";").split(";")[0]
    match = _ARCH.match(first)
    if match is None:
        raise ValueError(f"TORCH_CUDA_ARCH_LIST entry {first!r} is not an architecture like 9.0, 9.0a or 8.6+PTX")
    return f"sm_{match['major']}{match['minor'] or 0}{match['suffix']}"


def include_dirs() -> list[str]:
    """Headers CuPy's kernels may include: the toolkit's (cuda_fp16.h, ...) and CuPy's own."""
    dirs = []
    cuda_home = isolation.detect_cuda_home()
    if cuda_home and os.path.isdir(os.path.join(cuda_home, "include")):
        dirs.append(os.path.join(cuda_home, "include"))
    spec = importlib.util.find_spec("cupy")  # located, not imported
    if spec is not None and spec.origin:
        cupy_headers = os.path.join(os.path.dirname(spec.origin), "_core", "include")
        if os.path.isdir(cupy_headers):
            dirs.append(cupy_headers)
    return dirs


def compile_options(request: NvrtcRequest, arch: str, includes: list[str]) -> list[str]:
    """The NVRTC options of a compile, as CuPy would pass them for the same RawKernel: the
    request's, C++17 unless it names a standard, flush-to-zero, the target and includes."""
    options = list(request.options)
    if not any(o.startswith(("-std", "--std")) for o in options):
        options.append("-std=c++17")
    options += ["-ftz=true", f"-arch={arch}", "--device-as-default-execution-space"]
    return options + [f"-I{d}" for d in includes]


def compile_key(request: NvrtcRequest, arch: str, library: str, version: str, includes: list[str]) -> str:
    payload = {"request": request.model_dump(exclude={"kernel"}), "arch": arch, "nvrtc": version,
               "library": os.path.realpath(library), "includes": includes, "compiler": COMPILER_VERSION,
               "options": compile_options(request, arch, includes)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


# the service ---------------------------------------------------------------------------------------

class NvrtcService:
    """Answers workers' compile requests: cache lookup, else a sandboxed NVRTC compile, then a
    private copy of the cubin in the asking worker's scratch directory."""

    def __init__(self, cache: BuildCache, backend: isolation.Backend, compiler=None):
        self.cache, self.backend = cache, backend
        self.compiler = compiler or run_compiler  # (spec, scratch, backend, deadline) -> result dict

    def compile(self, request: NvrtcRequest, device: str, deadline: float) -> CachedBuild:
        library, version = nvrtc_available()
        if library is None:
            raise BuildFailure(f"cannot compile the CuPy kernel on the host: {version}")
        arch, includes = nvrtc_arch(target_architectures(device)), include_dirs()
        key = compile_key(request, arch, library, version, includes)
        found = self.cache.lookup(key)
        if found is not None:
            return found
        with self.cache.lock(key):
            found = self.cache.lookup(key)  # compiled by another worker while we waited
            if found is not None:
                return found
            return self._compile_and_store(request, key, library, compile_options(request, arch, includes),
                                           deadline)

    def deliver(self, build: CachedBuild, scratch: Path) -> str:
        """Copy the cubin where the worker can load it; the cache stays out of the sandbox."""
        if build.library is None:
            raise ValueError(f"the compile {build.key[:16]} failed: it has no cubin to deliver")
        target = scratch / "builds" / build.key[:24] / CUBIN
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build.library, target)
        return str(target)

    def _compile_and_store(self, request: NvrtcRequest, key: str, library: str, options: list[str],
                           deadline: float) -> CachedBuild:
        staging = self.cache.root / "staging" / f"nvrtc-{key[:16]}-{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        try:
            spec = {"library": library, "source": request.source, "options": options,
                    "name_expressions": request.name_expressions or [], "out": str(staging / CUBIN)}
            result = self.compiler(spec, staging, self.backend, deadline)
            if result.get("crashed"):
                raise BuildFailure(f"the NVRTC compiler failed: {result.get('error', '')}")
            log = result.get("log", "") if result["ok"] else f"{result.get('error', '')}\n{result.get('log', '')}"
            build = CachedBuild(key=key, ok=result["ok"], name=request.kernel or "RawModule", log=log.strip(),
                                mode="nvrtc", seconds=float(result.get("seconds", 0.0)), file=CUBIN,
                                lowered=result.get("lowered", {}) if result["ok"] else {})
            return self.cache.store(key, build, Path(result["cubin"]) if result["ok"] else None)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def run_compiler(spec: dict, scratch: Path, backend: isolation.Backend, deadline: float) -> dict:
    """Run worker/nvrtc_runner.py on `spec` in a sandbox whose only writable place is `scratch`.
    Raises BuildFailure when it cannot finish."""
    library_dir = Path(spec["library"]).resolve().parent
    return run_trusted_tool("nvrtc_runner", spec, scratch, backend, deadline, "the NVRTC compiler",
                            read_only=(library_dir,))

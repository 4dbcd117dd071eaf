"""Cold compile time of one ReLU kernel per backend (`--backend cuda|cupy|triton|cpp`).

The same elementwise ReLU, written for each backend as the honest candidates of
tests/adversarial/honest/ write it, compiled from nothing:
  cupy      its CUDA C through the host's NVRTC compiler (sandbox/nvrtc.py: the sandboxed
            compiler process, NVRTC, the cache entry), from an empty cache; also NVRTC's own
            time inside that process, and the cached lookup that follows
  cuda      its load_inline extension through the host's builder (`fast` mode, builds.py) from
            an empty cache; needs the CUDA build of torch and nvcc (GPU not needed)
  cpp       the C++ load_inline extension of relu_cpp_extension.py, likewise (any torch)
  triton    the first launch of the Triton kernel in a fresh process with an empty cache (what a
            candidate pays: Triton compiles in process at first launch), minus a second launch;
            needs a GPU and triton
A backend whose requirements are missing is reported as pending, with the reason.

    python benchmarks/backend_compile.py [--repeats 3] [--backends cupy,cuda,cpp,triton]

Prints one JSON object: the machine, the median seconds per backend, and each load_inline
backend's time as a multiple of CuPy's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from build_speed import candidate_request  # noqa: E402

from kernelopt.sandbox import isolation, nvrtc  # noqa: E402
from kernelopt.sandbox.builds import BuildCache, BuildService, parse_request  # noqa: E402

HONEST = REPO / "tests" / "adversarial" / "honest"

_TRITON = """
import sys, time, torch, triton, triton.language as tl
namespace = {}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), namespace)
x = torch.randn(256, 4096, device="cuda")
model = namespace["ModelNew"]()
torch.cuda.synchronize()
begin = time.perf_counter(); model(x); torch.cuda.synchronize(); first = time.perf_counter() - begin
begin = time.perf_counter(); model(x); torch.cuda.synchronize(); second = time.perf_counter() - begin
print(first - second)
"""


def machine() -> str:
    name = f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}"
    try:
        import torch

        if torch.cuda.is_available():
            name += f", {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return name


def time_cupy() -> dict:
    library, version = nvrtc.nvrtc_available()
    if library is None:
        raise Pending(version)
    text = (HONEST / "relu_cupy_rawkernel.py").read_text()
    source = re.search(r'_SOURCE = r"""(.*?)"""', text, re.S).group(1)
    request = nvrtc.parse_request({"builder": "nvrtc", "source": source, "kernel": "honest_relu"})
    with tempfile.TemporaryDirectory() as scratch:
        service = nvrtc.NvrtcService(BuildCache(Path(scratch) / "cache"), isolation.select_backend("auto"))
        begin = time.perf_counter()
        build = service.compile(request, _device(), time.monotonic() + 600)
        cold = time.perf_counter() - begin
        assert build.ok, build.log
        begin = time.perf_counter()
        service.deliver(service.compile(request, _device(), time.monotonic() + 60), Path(scratch))
        cached = time.perf_counter() - begin
    return {"seconds": cold, "nvrtc_seconds": build.seconds, "cached_seconds": cached, "nvrtc": version}


def time_extension(candidate: str, needs_cuda: bool) -> dict:
    import torch

    if needs_cuda and (torch.version.cuda is None or isolation.detect_cuda_home() is None):
        raise Pending(f"needs the CUDA build of torch and nvcc (torch {torch.__version__} here)")
    request = parse_request(candidate_request(HONEST / candidate))
    with tempfile.TemporaryDirectory() as scratch:
        service = BuildService(BuildCache(Path(scratch) / "cache"), isolation.select_backend("auto"), "fast")
        begin = time.perf_counter()
        build = service.build(request, _device(), time.monotonic() + 3600)
        cold = time.perf_counter() - begin
        assert build.ok, build.log[-3000:]
    return {"seconds": cold, "builder_seconds": build.seconds}


def time_triton() -> dict:
    import importlib.util

    import torch

    if not torch.cuda.is_available() or importlib.util.find_spec("triton") is None:
        raise Pending("needs a GPU and triton")
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, **isolation.kernel_cache_environment(Path(scratch)))
        done = subprocess.run([sys.executable, "-c", _TRITON, str(HONEST / "relu_triton.py")], env=env,
                              capture_output=True, text=True, check=True)
    return {"seconds": float(done.stdout.strip().splitlines()[-1])}


def _device() -> str:
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


class Pending(Exception):
    pass


TIMERS = {"cupy": time_cupy, "cuda": lambda: time_extension("relu_cuda_extension.py", True),
          "cpp": lambda: time_extension("relu_cpp_extension.py", False), "triton": time_triton}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--backends", default="cupy,cuda,cpp,triton")
    args = parser.parse_args()
    import torch

    results: dict = {"machine": machine(), "torch": torch.__version__, "repeats": args.repeats,
                     "seconds": {}, "details": {}, "pending": {}}
    for backend in args.backends.split(","):
        runs = []
        try:
            for _ in range(args.repeats):
                runs.append(TIMERS[backend]())
                print(f"{backend}: {runs[-1]['seconds']:.3f} s", file=sys.stderr)
        except Pending as why:
            results["pending"][backend] = str(why)
            continue
        results["seconds"][backend] = round(statistics.median(r["seconds"] for r in runs), 3)
        results["details"][backend] = runs
    cupy = results["seconds"].get("cupy")
    if cupy:
        results["times_cupy"] = {b: round(s / cupy, 1) for b, s in results["seconds"].items() if b != "cupy"}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

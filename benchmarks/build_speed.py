"""Cold and cached extension builds: kernelopt's builder against stock `load_inline`.

Builds the same canonical elementwise CUDA candidate (the ReLU of
tests/adversarial/honest/relu_cuda_extension.py) side by side:
  stock      torch.utils.cpp_extension.load_inline in a fresh process and build directory
  exact      kernelopt's builder, same compiler commands, nvcc's host and device chains at once
  fast       exact, plus the lean torch header for the CUDA source
  fast+pch   fast, after `kernelopt cache warm` for its flags: torch/extension.h and, for a CUDA
             candidate, the CUDA host prefix precompiled beforehand (not timed)
  cached     a second request for the same build: cache lookup and copy for the worker
Each cold build starts from an empty cache and build directory. Needs the CUDA build of torch
and nvcc (no GPU: the build targets TORCH_CUDA_ARCH_LIST, default 9.0).

    python benchmarks/build_speed.py [--repeats 1] [--modes stock,exact,fast,fast+pch] [--cpp]

`--cpp` builds the C++ (CPU) ReLU of relu_cpp_extension.py instead. Prints one JSON object
with the seconds of each and the ratios to stock.
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

from kernelopt.sandbox import isolation  # noqa: E402
from kernelopt.sandbox.builds import BuildCache, BuildService, parse_request  # noqa: E402

CUDA_CANDIDATE = REPO / "tests" / "adversarial" / "honest" / "relu_cuda_extension.py"
CPP_CANDIDATE = REPO / "tests" / "adversarial" / "honest" / "relu_cpp_extension.py"

_STOCK = """
import sys, json
from torch.utils import cpp_extension
cpp_extension._import_module_from_library = lambda *a, **k: None  # build only, like ours
request = json.load(open(sys.argv[1]))
cpp_extension.load_inline(request["name"], request["cpp_sources"], cuda_sources=request["cuda_sources"] or None,
                          functions=request["functions"], extra_cflags=request["extra_cflags"] or None,
                          extra_cuda_cflags=request.get("extra_cuda_cflags") or None,
                          build_directory=sys.argv[2], verbose=False)
"""


def candidate_request(path: Path) -> dict:
    """The load_inline call of a bundled candidate, as the worker would send it."""
    text = path.read_text()
    strings = dict(re.findall(r'^(_[A-Z_]+) = r?"""(.*?)"""', text, re.S | re.M))
    strings.update(re.findall(r'^(_[A-Z_]+) = "(.*?)"$', text, re.M))
    call = re.search(r"load_inline\((.*?)\n\)", text, re.S).group(1)
    name = re.search(r'name="([^"]+)"', call).group(1)
    cpp = strings[re.search(r"cpp_sources=(\w+)", call).group(1)]
    cuda_var = re.search(r"cuda_sources=(\w+)", call)
    functions = re.search(r"functions=\[([^\]]*)\]", call).group(1)
    flags = re.search(r"extra_cflags=\[([^\]]*)\]", call)
    return {"builder": "load_inline", "name": name, "cpp_sources": [cpp],
            "cuda_sources": [strings[cuda_var.group(1)]] if cuda_var else [],
            "functions": re.findall(r'"([^"]+)"', functions),
            "extra_cflags": re.findall(r'"([^"]+)"', flags.group(1)) if flags else []}


def time_stock(request: dict) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        spec = Path(scratch) / "request.json"
        spec.write_text(json.dumps(request))
        (Path(scratch) / "build").mkdir()
        env = dict(os.environ, TORCH_CUDA_ARCH_LIST=os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0"))
        env.setdefault("CUDA_HOME", isolation.detect_cuda_home() or "")
        begin = time.perf_counter()
        subprocess.run([sys.executable, "-c", _STOCK, str(spec), str(Path(scratch) / "build")],
                       check=True, env=env)
        return time.perf_counter() - begin


def time_ours(request: dict, mode: str) -> tuple[float, float, dict]:
    """Seconds for a cold build, seconds for the cached request after it, and its record.
    `fast+pch`: the fast build after `kernelopt cache warm` (not timed) for its flags."""
    backend = isolation.select_backend("auto")
    with tempfile.TemporaryDirectory() as scratch:
        service = BuildService(BuildCache(Path(scratch) / "cache"), backend, mode.split("+")[0])
        parsed = parse_request(request)
        if mode.endswith("+pch"):
            service.warm(parsed.extra_cflags, with_cuda=bool(parsed.cuda_sources))
            if parsed.cuda_sources:
                service.warm_cuda(parsed.extra_cuda_cflags)
        begin = time.perf_counter()
        build = service.build(parsed, "cpu", time.monotonic() + 3600)
        cold = time.perf_counter() - begin
        if not build.ok:
            raise SystemExit(f"{mode} build failed:\n{build.log[-3000:]}")
        begin = time.perf_counter()
        again = service.build(parsed, "cpu", time.monotonic() + 60)
        service.deliver(again, Path(scratch))
        cached = time.perf_counter() - begin
        assert again.cached
        used = [line for line in build.log.splitlines() if line.startswith("[kernelopt]")]
        return cold, cached, {"lean": build.lean, "builder_seconds": build.seconds, "notes": used}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--modes", default="stock,exact,fast,fast+pch")
    parser.add_argument("--cpp", action="store_true", help="the C++ (CPU) extension instead of CUDA")
    args = parser.parse_args()
    request = candidate_request(CPP_CANDIDATE if args.cpp else CUDA_CANDIDATE)
    import torch

    results: dict = {"machine": f"{platform.node()} {os.cpu_count()} cores, {platform.processor() or platform.machine()}",
                     "torch": torch.__version__, "candidate": "cpp" if args.cpp else "cuda",
                     "repeats": args.repeats, "seconds": {}}
    for mode in args.modes.split(","):
        runs = []
        for _ in range(args.repeats):
            if mode == "stock":
                runs.append(time_stock(request))
            else:
                cold, cached, record = time_ours(request, mode)
                runs.append(cold)
                results.setdefault("cached_seconds", {})[mode] = round(cached, 3)
                results.setdefault("records", {})[mode] = record
            print(f"{mode}: {runs[-1]:.1f} s", file=sys.stderr)
        results["seconds"][mode] = round(statistics.median(runs), 2)
    stock = results["seconds"].get("stock")
    if stock:
        results["speedup_vs_stock"] = {m: round(stock / s, 2) for m, s in results["seconds"].items()}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""Candidates per minute on a GPU: `kernelopt eval` in one batch against a straightforward
single-process KernelBench-style evaluation of the same CUDA candidates.

The candidates are N distinct load_inline CUDA ReLU kernels (block size and a comment in the
CUDA source vary, so every one is a cold build in both harnesses) for examples/level1/1_ReLU.py.

KernelBench style, in one Python process: time the reference once (100 CUDA-event trials), then
per candidate exec its source (load_inline compiles into a fresh TORCH_EXTENSIONS_DIR), check 5
random input sets with allclose(atol=rtol=1e-2) and time 100 trials. No sandbox, no fresh process
per candidate, no defence against any hack: the cheapest honest harness there is.

kernelopt: `kernelopt eval --reference P --candidate DIR --device cuda --jobs J --json` with an
empty build cache (so its builds are cold too), optionally after `kernelopt cache warm` (the
one-time precompiled header, timed and reported separately). Usage (on a GPU machine):

    python benchmarks/gpu_throughput.py [--count 8] [--jobs 4] [--timing-budget 10] [--warm-pch]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBLEM = REPO / "examples" / "level1" / "1_ReLU.py"
TEMPLATE = REPO / "tests" / "adversarial" / "honest" / "relu_cuda_extension.py"
KERNELOPT = [sys.executable, "-m", "kernelopt"]
BLOCK_SIZES = (128, 256, 512, 1024)


def write_candidates(folder: Path, count: int) -> list[Path]:
    template = TEMPLATE.read_text(encoding="utf-8")
    paths = []
    for number in range(count):
        threads = BLOCK_SIZES[number % len(BLOCK_SIZES)]
        source = (template
                  .replace("const int threads = 256;", f"const int threads = {threads};")
                  .replace("#include <torch/extension.h>", f"#include <torch/extension.h>\n// variant {number}")
                  .replace('name="kernelopt_adv_relu_cuda"', f'name="bench_relu_{number:02d}"'))
        path = folder / f"relu_cuda_{number:02d}.py"
        path.write_text(source, encoding="utf-8")
        paths.append(path)
    return paths


# --- the KernelBench-style harness (runs in its own process) ---------------------------------

def _load_module(path: Path, name: str) -> dict:
    namespace: dict = {"__name__": name}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    return namespace


def _time_cuda(model, inputs, trials: int = 100) -> float:
    import torch

    for _ in range(3):
        model(*inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(*inputs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sum(times) / len(times)


def kernelbench_style(folder: Path) -> None:
    import torch

    reference = _load_module(PROBLEM, "reference")
    torch.manual_seed(0)
    model = reference["Model"](*reference["get_init_inputs"]()).cuda()
    inputs = [x.cuda() for x in reference["get_inputs"]()]
    reference_ms = _time_cuda(model, inputs)
    for path in sorted(folder.glob("*.py")):
        begin = time.perf_counter()
        candidate = _load_module(path, path.stem)["ModelNew"](*reference["get_init_inputs"]()).cuda()
        correct = True
        for trial in range(5):
            torch.manual_seed(trial)
            trial_inputs = [x.cuda() for x in reference["get_inputs"]()]
            correct &= torch.allclose(model(*trial_inputs), candidate(*trial_inputs), atol=1e-2, rtol=1e-2)
        speedup = reference_ms / _time_cuda(candidate, inputs) if correct else None
        print(json.dumps({"candidate": path.name, "correct": bool(correct), "speedup": speedup,
                          "seconds": time.perf_counter() - begin}), flush=True)


# --- the driver ------------------------------------------------------------------------------

def run_kernelbench_style(folder: Path) -> tuple[float, list[dict]]:
    with tempfile.TemporaryDirectory(prefix="kb-style-ext-") as extensions:
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": extensions}
        begin = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--kernelbench-style", str(folder)],
                              capture_output=True, text=True, env=env)
        wall = time.perf_counter() - begin
    if done.returncode != 0:
        sys.exit(f"KernelBench-style harness failed:\n{done.stderr[-4000:]}")
    return wall, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def run_kernelopt(folder: Path, cache: Path, jobs: int, timing_budget: float) -> tuple[float, list[dict]]:
    command = [*KERNELOPT, "eval", "--reference", str(PROBLEM), "--candidate", str(folder), "--json",
               "--device", "cuda", "--jobs", str(jobs), "--timing-budget", str(timing_budget),
               "--build-cache", str(cache)]
    begin = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - begin
    if done.returncode not in (0, 1):
        sys.exit(f"kernelopt eval failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return wall, [json.loads(line) for line in done.stdout.splitlines()]


def warm_cache(cache: Path) -> float:
    begin = time.perf_counter()
    subprocess.run([*KERNELOPT, "cache", "warm", "--dir", str(cache)], check=True, capture_output=True)
    return time.perf_counter() - begin


def machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return (f"{gpu}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
            f"load average {os.getloadavg()[0]:.2f}, Python {platform.python_version()}")


def summarize(name: str, wall: float, results: list[dict], count: int) -> None:
    correct = sum(1 for r in results if r.get("correct") or r.get("status") == "correct")
    speedups = sorted(r["speedup"] for r in results if r.get("speedup"))
    spread = f"speedups {speedups[0]:.2f}-{speedups[-1]:.2f}x" if speedups else "no speedups"
    print(f"{name}: {wall:.1f} s for {count} candidates, {60 * count / wall:.2f} candidates/min, "
          f"{correct}/{count} correct, {spread}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--timing-budget", type=float, default=10.0)
    parser.add_argument("--warm-pch", action="store_true", help="run `kernelopt cache warm` first")
    parser.add_argument("--only", choices=["kernelbench", "kernelopt"], help="run one side alone")
    parser.add_argument("--kernelbench-style", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kernelbench_style:
        return kernelbench_style(Path(args.kernelbench_style))
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="kernelopt-gpu-bench-") as scratch:
        folder = Path(scratch) / "candidates"
        folder.mkdir()
        write_candidates(folder, args.count)
        walls = {}
        if args.only != "kernelopt":
            walls["kernelbench"], results = run_kernelbench_style(folder)
            summarize("KernelBench-style single process", walls["kernelbench"], results, args.count)
        if args.only != "kernelbench":
            cache = Path(scratch) / "build-cache"
            if args.warm_pch:
                print(f"kernelopt cache warm (one-time, not counted below): {warm_cache(cache):.1f} s")
            walls["kernelopt"], results = run_kernelopt(folder, cache, args.jobs, args.timing_budget)
            summarize(f"kernelopt eval --jobs {args.jobs} --timing-budget {args.timing_budget:g}",
                      walls["kernelopt"], results, args.count)
            for r in results:
                print(f"  {r['candidate']}: {r['status']} {r.get('speedup')} "
                      f"builds={[(b['mode'], round(b['build_seconds'], 1), round(b['wait_seconds'], 1)) for b in r.get('builds') or []]}")
    print(f"machine after: {machine()}")
    if len(walls) == 2:
        print(f"kernelopt judges {walls['kernelbench'] / walls['kernelopt']:.2f}x more candidates per minute")


if __name__ == "__main__":
    main()

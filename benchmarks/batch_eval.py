"""Wall time of judging 20 candidates: one batch `kernelopt eval` against 20 separate ones.

The candidates are copies of one candidate (default examples/candidates/1_ReLU/relu_clamp.py)
made distinct by a comment, judged against its problem (default examples/level1/1_ReLU.py)
with the same options both ways. The batch
keeps the reference worker warm, starts candidate workers ahead and compares with the
reference's kept correctness outputs; the separate runs pay the CLI's start-up, both workers'
start-up and the reference's trials every time. Usage:

    .venv/bin/python benchmarks/batch_eval.py [--count 20] [--device cpu] [--timing-budget 2] [--jobs 2]
        [--problem examples/level1/4_RedundantSoftmax.py
         --candidate examples/candidates/4_RedundantSoftmax/drop_dead_work.py]

With `--against DIR` (another checkout of kernelopt, e.g. `git worktree add /tmp/base main`), the
same batch runs with this checkout's package and with DIR's, alternately (`--repeats` times each,
on the same machine and interpreter), and the ratio of their wall times is printed instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBLEM = REPO / "examples" / "level1" / "1_ReLU.py"
CANDIDATE = REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py"
KERNELOPT = str(Path(sys.executable).parent / "kernelopt")


def write_candidates(folder: Path, candidate: Path, count: int) -> list[Path]:
    source = candidate.read_text(encoding="utf-8")
    paths = []
    for number in range(count):
        path = folder / f"{candidate.stem}_{number:02d}.py"
        path.write_text(f"{source}\n# copy {number}\n", encoding="utf-8")
        paths.append(path)
    return paths


def eval_command(candidates: list[Path], options: list[str], package: Path | None = None) -> list[str]:
    """`kernelopt eval`, or with `package` (a checkout's root) the CLI of that checkout's package."""
    prefix = [KERNELOPT] if package is None else [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
                                                  "from kernelopt.cli import main; sys.exit(main())", str(package)]
    return [*prefix, "eval", "--candidate", *map(str, candidates), "--json", *options]


def run_batch(candidates: list[Path], options: list[str], jobs: int,
              package: Path | None = None) -> tuple[float, list[dict]]:
    begin = time.perf_counter()
    done = subprocess.run(eval_command(candidates, [*options, "--jobs", str(jobs)], package),
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - begin
    return wall, [json.loads(line) for line in done.stdout.splitlines()]


def run_separately(candidates: list[Path], options: list[str]) -> tuple[float, list[dict]]:
    begin = time.perf_counter()
    results = []
    for candidate in candidates:
        done = subprocess.run(eval_command([candidate], options), capture_output=True, text=True, check=True)
        results.append(json.loads(done.stdout))
    return time.perf_counter() - begin, results


def _precision(result: dict) -> float:
    return result["timing"].get("speedup_precision") or float("nan")


def machine() -> str:
    return (f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.2f}, Python {platform.python_version()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--problem", type=Path, default=PROBLEM)
    parser.add_argument("--candidate", type=Path, default=CANDIDATE)
    parser.add_argument("--against", type=Path, help="another checkout's root: compare batch wall times with it")
    parser.add_argument("--repeats", type=int, default=2, help="with --against: batches per side, alternating")
    args = parser.parse_args()
    options = ["--reference", str(args.problem), "--device", args.device, "--timing-budget", str(args.timing_budget)]
    print(f"machine: {machine()}")
    if args.against is not None:
        compare_against(args, options)
        return
    with tempfile.TemporaryDirectory(prefix="kernelopt-batch-bench-") as folder:
        candidates = write_candidates(Path(folder), args.candidate, args.count)
        batch_wall, batch_results = run_batch(candidates, options, args.jobs)
        print(f"machine after the batch: {machine()}")
        separate_wall, separate_results = run_separately(candidates, options)
    print(f"machine after the separate runs: {machine()}")
    for name, results in (("batch", batch_results), ("separate", separate_results)):
        statuses = sorted({r["status"] for r in results})
        speedups = sorted(r["speedup"] for r in results if r["speedup"] is not None)
        print(f"{name}: {len(results)} verdicts {statuses}, speedups {speedups[0]:.2f}-{speedups[-1]:.2f}x "
              f"(median {speedups[len(speedups) // 2]:.2f}x)")
        timed = [r for r in results if r.get("timing")]
        if timed:
            print(f"  timing phase: median {statistics.median(r['durations']['timing'] for r in timed):.2f} s, "
                  f"{statistics.median(r['timing']['candidate']['samples'] for r in timed):.0f} calls a side, "
                  f"speedup known to +-{statistics.median(_precision(r) for r in timed):.1%} (median)")
    print(f"{args.count} copies of {args.candidate.name}, {' '.join(options)}")
    print(f"one batch `kernelopt eval --candidate c1..c{args.count} --jobs {args.jobs}`: {batch_wall:.1f} s "
          f"({batch_wall / args.count:.2f} s per candidate)")
    print(f"{args.count} separate `kernelopt eval` processes: {separate_wall:.1f} s "
          f"({separate_wall / args.count:.2f} s per candidate)")
    print(f"batch is {separate_wall / batch_wall:.2f}x faster")


def compare_against(args, options: list[str]) -> None:
    """The same batch with this checkout and with `args.against`, alternately."""
    walls: dict[str, list[float]] = {"this checkout": [], str(args.against): []}
    with tempfile.TemporaryDirectory(prefix="kernelopt-batch-bench-") as folder:
        candidates = write_candidates(Path(folder), args.candidate, args.count)
        for _ in range(args.repeats):
            for name, package in (("this checkout", REPO), (str(args.against), args.against)):
                wall, results = run_batch(candidates, options, args.jobs, package)
                walls[name].append(wall)
                speedups = sorted(r["speedup"] for r in results if r["speedup"] is not None)
                samples = [r["timing"]["candidate"]["samples"] for r in results if r.get("timing")]
                print(f"{name}: {wall:.1f} s for {args.count} candidates, statuses "
                      f"{sorted({r['status'] for r in results})}, speedups {speedups[0]:.2f}-{speedups[-1]:.2f}x, "
                      f"median {statistics.median(samples) if samples else 0:.0f} timed calls a side", flush=True)
    mine, theirs = (statistics.fmean(w) for w in walls.values())
    print(f"machine after: {machine()}")
    print(f"{args.count} copies of {args.candidate.name}, {' '.join(options)}, --jobs {args.jobs}")
    print(f"this checkout {mine / args.count:.2f} s per candidate, {args.against} {theirs / args.count:.2f} s: "
          f"this checkout takes {mine / theirs:.2f}x the time")


if __name__ == "__main__":
    main()

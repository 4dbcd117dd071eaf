"""Each problem's physical floor on this machine and the reference's fraction of speed of light.

For every problem file: the bytes one call moves as the referee counts them (its inputs and
outputs, each once), the floor those bytes give at this device's ceiling
(kernelopt/sandbox/physics.py: on a CPU the measured, cached one-thread bandwidth), and the
reference's mean time per call measured here in a trusted child process per problem (one thread
and the workers' malloc, as the workers run; a warm-up call, then timed calls on fresh inputs
from `get_inputs` made before each call, up to --calls or --seconds). An exact copy of the reference measures what the
reference does, so its SOL is the reference's: this is how far every exact copy stands from the
rule `faster_than_physics` (which fires below floor / RULE_MARGIN, that is at an SOL above
RULE_MARGIN). The inputs here are made just before each call, so they may sit in a cache, as in
the referee, and no harness runs around the calls: if anything, the reference runs faster here
than in a verdict, and its SOL reads higher.

    .venv/bin/python benchmarks/physical_floor.py examples/level1/*.py [--calls 3] [--seconds 20]
        [--out DIR]
    .venv/bin/python benchmarks/physical_floor.py --kernelbench /path/to/KernelBench --ref v0.1 \\
        --level 1 --problems 1,2,8 [--out DIR]

Markdown on stdout (and OUT/physical_floor.md), one JSON line per problem in
OUT/physical_floor.jsonl.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_checkout import export_problems  # noqa: E402

CHILD_TIMEOUT_S = 300


def measure_one(path: Path, calls: int, seconds: float) -> dict:
    """In the child: bytes of one call and the reference's mean time per call (one thread)."""
    import torch

    torch.set_num_threads(1)
    problem: dict = {"__name__": "physical_floor_problem"}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), problem)  # trusted: the reference
    torch.manual_seed(42)
    init = problem["get_init_inputs"]()
    torch.manual_seed(42)
    model = problem["Model"](*init)

    def nbytes(values) -> int:
        if isinstance(values, torch.Tensor):
            return values.numel() * values.element_size()
        if isinstance(values, (list, tuple)):
            return sum(nbytes(v) for v in values)
        return 0

    times: list[float] = []
    moved = 0
    end = time.monotonic() + seconds
    with torch.no_grad():
        for index in range(calls + 1):
            torch.manual_seed(1000 + index)
            inputs = problem["get_inputs"]()
            begin = time.perf_counter()
            output = model(*inputs)
            took = time.perf_counter() - begin
            moved = nbytes(inputs) + nbytes(output)
            del output, inputs
            if index > 0:  # the first call warms up
                times.append(took * 1e3)
            if index > 0 and time.monotonic() > end:
                break
    return {"bytes": moved, "reference_ms": sum(times) / len(times), "calls": len(times)}


def run_child(path: Path, calls: int, seconds: float) -> dict:
    """One problem in a child process with the workers' thread count, malloc and heap policy
    (isolation.worker_environment), so that its calls allocate as a worker's do."""
    from kernelopt.sandbox.isolation import allocator_environment

    environment = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                   "OMP_WAIT_POLICY": "PASSIVE", "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                   "MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_TOP_PAD_": str(64 << 20),
                   **allocator_environment()}
    try:
        done = subprocess.run([sys.executable, __file__, "--child", str(path), "--calls", str(calls),
                               "--seconds", str(seconds)], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                              env=environment)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def problem_files(args) -> list[Path]:
    if not args.kernelbench:
        return [Path(p) for p in args.files]
    dest = Path(tempfile.mkdtemp(prefix="physical-floor-"))
    export_problems(Path(args.kernelbench), args.ref, {args.level}, dest)
    wanted = {int(i) for i in args.problems.split(",")} if args.problems else None
    files = sorted((dest / "KernelBench" / f"level{args.level}").glob("*.py"),
                   key=lambda p: int(p.name.split("_", 1)[0]))
    return [p for p in files if wanted is None or int(p.name.split("_", 1)[0]) in wanted]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--kernelbench", help="a KernelBench clone or bare git directory")
    parser.add_argument("--ref", help="the revision to export (v0.1: the July 2025 sizes)")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--problems", help="ids, comma-separated")
    parser.add_argument("--calls", type=int, default=3, help="timed calls per problem at most")
    parser.add_argument("--seconds", type=float, default=20.0, help="stop timing a problem after this")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_one(args.child, args.calls, args.seconds)))
        return 0

    from kernelopt.sandbox import hardware, physics

    ceiling = physics.ceiling_for("cpu", None)
    if ceiling is None:
        print("no ceiling: the bandwidth probe failed", file=sys.stderr)
        return 1
    rows = []
    for path in problem_files(args):
        begin = time.monotonic()
        found = run_child(path, args.calls, args.seconds)
        row = {"problem": path.stem, **found, "seconds": round(time.monotonic() - begin, 1)}
        if "bytes" in found:
            row["floor_ms"] = physics.floor_ms(found["bytes"], ceiling)
            row["sol"] = row["floor_ms"] / found["reference_ms"]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    machine = (f"{hardware.describe('cpu').summary}, {os.cpu_count()} cores, {platform.system()} "
               f"{platform.release()}, torch {__import__('torch').__version__}, "
               f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}")
    lines = [f"Physical floor on {machine}", "",
             f"Ceiling: {ceiling.bandwidth_gbs:.4g} GB/s ({ceiling.source}: {ceiling.detail}); the rule fires at "
             f"an SOL above {physics.RULE_MARGIN:g}.", "",
             "| problem | bytes per call | floor ms | reference ms | calls | reference SOL |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['problem']} | - | - | - | - | {row['error']} |")
        else:
            lines.append(f"| {row['problem']} | {row['bytes']:,} | {row['floor_ms']:.4g} | {row['reference_ms']:.4g} | "
                         f"{row['calls']} | {row['sol']:.2e} |")
    solved = [row["sol"] for row in rows if "sol" in row]
    if solved:
        lines += ["", f"Highest reference SOL: {max(solved):.3g} (the rule's threshold: {physics.RULE_MARGIN:g})"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "physical_floor.md").write_text(text + "\n")
        (args.out / "physical_floor.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An honest candidate judged quiet and then beside another evaluation: do its readings agree?

Issue 41's acceptance on a 2-core machine: five evaluations of the same honest candidate with
another evaluation running beside it give intervals that overlap pairwise, within 25 % of its
quiet reading, with no flag; the exact copy judged beside it stays within 0.8x-1.25x.

The script judges CANDIDATE against PROBLEM `--runs` times on a quiet machine, then `--runs` times
while a background loop judges an exact copy of `--beside` (a KernelBench-format problem: its
`Model` renamed `ModelNew`) again and again through the CLI. It reports every reading (speedup,
interval, flags), the quiet median, each loaded reading's distance from it, whether the loaded
intervals overlap pairwise, and the background's exact-copy verdicts. Markdown on stdout and in
--out. Usage:

    .venv/bin/python benchmarks/honest_under_load.py --problem examples/level1/4_RedundantSoftmax.py \\
        --candidate examples/candidates/4_RedundantSoftmax/drop_dead_work.py \\
        --beside examples/level1/1_ReLU.py [--runs 5] [--timing-budget 2] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, evaluate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_identity import HONEST_RANGE, as_candidate  # noqa: E402

KERNELOPT = str(Path(sys.executable).parent / "kernelopt")


def reading(result) -> dict:
    precision = result.timing.speedup_precision if result.timing else None
    return {"status": result.status, "speedup": result.speedup, "precision": precision,
            "flags": list(result.flags)}


def interval(r: dict) -> tuple[float, float]:
    p = r["precision"] or 0.0
    return r["speedup"] * (1 - p), r["speedup"] * (1 + p)


def background_loop(problem: Path, budget: float, log: Path) -> subprocess.Popen:
    """Judge an exact copy of `problem` again and again, one JSON verdict per line in `log`."""
    copy = Path(tempfile.mkdtemp()) / "exact_copy.py"
    copy.write_text(as_candidate(problem.read_text()))
    script = (f"while true; do {KERNELOPT} eval --reference {problem} --candidate {copy} --json "
              f"--timing-budget {budget} >> {log} 2>/dev/null; done")
    return subprocess.Popen(["bash", "-c", script], start_new_session=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--beside", type=Path, required=True, help="the problem whose exact copy runs beside")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    problem, source = load_problem(args.problem), args.candidate.read_text()
    options = EvalOptions(device="cpu", timing_budget=args.timing_budget)
    quiet = [reading(evaluate(problem, source, options)) for _ in range(args.runs)]
    log = Path(tempfile.mkdtemp()) / "beside.jsonl"
    loop = background_loop(args.beside, args.timing_budget, log)
    time.sleep(5)  # the loop's first evaluation is under way
    try:
        loaded = [reading(evaluate(problem, source, options)) for _ in range(args.runs)]
    finally:
        os.killpg(loop.pid, 9)
    beside = [json.loads(line) for line in log.read_text().splitlines() if line.strip().startswith("{")]
    print("\n".join(report(args, quiet, loaded, beside)))
    if args.out:
        args.out.write_text("\n".join(report(args, quiet, loaded, beside)) + "\n")


def report(args, quiet: list[dict], loaded: list[dict], beside: list[dict]) -> list[str]:
    correct_quiet = [r["speedup"] for r in quiet if r["status"] == "correct"]
    base = statistics.median(correct_quiet) if correct_quiet else None
    lines = [f"`{args.candidate}` on `{args.problem}`, {args.runs} evaluations quiet and {args.runs} beside an "
             f"exact copy of `{args.beside}` judged in a loop; timing budget {args.timing_budget} s; "
             f"{platform.node()}, {os.cpu_count()} cores.", "",
             "| condition | status | speedup | 95 % interval | flags | from the quiet median |",
             "| --- | --- | --- | --- | --- | --- |"]
    for condition, readings in (("quiet", quiet), ("beside", loaded)):
        for r in readings:
            if r["status"] != "correct":
                lines.append(f"| {condition} | {r['status']} | - | - | {', '.join(r['flags'])} | - |")
                continue
            low, high = interval(r)
            off = f"{100 * (r['speedup'] / base - 1):+.1f}%" if base else "-"
            lines.append(f"| {condition} | correct | {r['speedup']:.3f}x | [{low:.3f}, {high:.3f}] | "
                         f"{', '.join(r['flags']) or '-'} | {off} |")
    ok = [r for r in loaded if r["status"] == "correct"]
    overlap = all(interval(a)[0] <= interval(b)[1] and interval(b)[0] <= interval(a)[1]
                  for a, b in itertools.combinations(ok, 2))
    within = base is not None and all(abs(r["speedup"] / base - 1) <= 0.25 for r in ok)
    flagged = sum(1 for r in quiet + loaded if r["flags"])
    lines += ["", f"- quiet median: {base:.3f}x" if base else "- no correct quiet reading",
              f"- beside: {len(ok)} of {len(loaded)} correct; intervals overlap pairwise: {overlap}; "
              f"all within 25 % of the quiet median: {within}; readings flagged: {flagged}"]
    speedups = [b.get("speedup") for b in beside if b.get("status") == "correct"]
    inside = sum(1 for s in speedups if HONEST_RANGE[0] <= s <= HONEST_RANGE[1])
    lines.append(f"- the exact copy beside: {len(beside)} verdicts, {len(speedups)} correct, {inside} within "
                 f"{HONEST_RANGE[0]}x-{HONEST_RANGE[1]}x" + (f" ({min(speedups):.3f}x-{max(speedups):.3f}x)"
                                                             if speedups else ""))
    return lines


if __name__ == "__main__":
    main()

"""Wall time of `kernelopt eval` for a trivial candidate, and where it goes.

Runs the real CLI (a fresh process each time, as a user would) on a small problem and reports
the median wall time with the referee's own per-phase durations. Usage:

    .venv/bin/python benchmarks/eval_overhead.py [--runs 5] [--device cpu] [--timing-budget 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBLEM = REPO / "examples" / "level1" / "1_ReLU.py"
CANDIDATE = REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py"


def run_once(device: str, timing_budget: float) -> tuple[float, dict]:
    command = [str(Path(sys.executable).parent / "kernelopt"), "eval", "--reference", str(PROBLEM),
               "--candidate", str(CANDIDATE), "--device", device, "--json",
               "--timing-budget", str(timing_budget)]
    begin = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - begin
    result = json.loads(done.stdout)
    assert result["status"] == "correct", result["message"]
    return wall, result["durations"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timing-budget", type=float, default=2.0)
    args = parser.parse_args()
    walls, phases = [], {}
    for _ in range(args.runs):
        wall, durations = run_once(args.device, args.timing_budget)
        walls.append(wall)
        for name, seconds in durations.items():
            phases.setdefault(name, []).append(seconds)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{args.runs} runs, device {args.device}, timing budget {args.timing_budget} s")
    print(f"kernelopt eval wall time: median {statistics.median(walls):.2f} s "
          f"(min {min(walls):.2f}, max {max(walls):.2f})")
    cli_overhead = statistics.median(walls) - statistics.median(phases["total"])
    print(f"  CLI start-up and imports outside the referee: {cli_overhead:.2f} s")
    for name in ("startup", "load", "correctness", "timing", "total"):
        if name in phases:
            print(f"  {name:<12} median {statistics.median(phases[name]):.2f} s")


if __name__ == "__main__":
    main()

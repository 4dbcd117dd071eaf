"""Does the search crown the same candidate every time? (issue 46's acceptance: selection that
survives noise.)

Runs `kernelopt optimize` `--runs` times on 4_RedundantSoftmax with the same scripted answers from
a loopback OpenAI-compatible server (tests/llm_server.py, through the real client): the reference's
own code, the dead work dropped, the same rewrite spelt differently (a near tie), and a typo.
Each run's crowned attempt, its speedup and interval are reported, and whether every run crowned
the same attempt with intervals that overlap pairwise. With `--busy-cores 1` a process spins on
one core throughout. Usage:

    .venv/bin/python benchmarks/crowning.py [--runs 5] [--busy-cores 0|1] [--timing-budget 2] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from conftest import SOFTMAX_BROKEN, SOFTMAX_EQUAL, SOFTMAX_FAST, SOFTMAX_PROGRAM  # noqa: E402
from llm_server import ScriptedLLMServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing_stability import busy_processes  # noqa: E402

KERNELOPT = str(Path(sys.executable).parent / "kernelopt")
NEAR_TIE = SOFTMAX_PROGRAM.format(body="        return x.softmax(-1)")
ANSWERS = [SOFTMAX_EQUAL, SOFTMAX_FAST, NEAR_TIE, SOFTMAX_BROKEN]


def one_run(store: Path, budget: float) -> dict:
    with ScriptedLLMServer([f"```python\n{code}```" for code in ANSWERS]) as server:
        done = subprocess.run([KERNELOPT, "optimize", str(REPO / "examples/level1/4_RedundantSoftmax.py"),
                               "--model", "test-model", "--base-url", server.url, "--store", str(store),
                               "--budget", str(len(ANSWERS)), "--strategy", "best-of-n", "--window", "1",
                               "--device", "cpu", "--timing-budget", str(budget), "--json", "--quiet"],
                              capture_output=True, text=True, env=dict(os.environ, OPENAI_API_KEY="test-key"),
                              timeout=900)
    summary = json.loads(done.stdout)
    return summary["best"] or {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy-cores", type=int, default=0)
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    spinners = busy_processes(args.busy_cores)
    try:
        crowned = [one_run(Path(tempfile.mkdtemp()) / "s.sqlite", args.timing_budget) for _ in range(args.runs)]
    finally:
        for spinner in spinners:
            spinner.kill()
    lines = [f"{args.runs} optimize runs, answers: the reference's code, the dead work dropped, the same "
             f"rewrite spelt differently, a typo (best-of-n, one at a time); busy cores {args.busy_cores}; "
             f"timing budget {args.timing_budget} s.", "", "| run | crowned attempt | speedup | 95 % interval |",
             "| --- | --- | --- | --- |"]
    intervals = []
    for number, best in enumerate(crowned, 1):
        p = best.get("speedup_precision") or 0.0
        low, high = best["speedup"] * (1 - p), best["speedup"] * (1 + p)
        intervals.append((low, high))
        lines.append(f"| {number} | {best['attempt']} | {best['speedup']:.3f}x | [{low:.3f}, {high:.3f}] |")
    same = len({b["attempt"] for b in crowned}) == 1
    overlap = all(a[0] <= b[1] and b[0] <= a[1] for a, b in itertools.combinations(intervals, 2))
    lines += ["", f"- the same attempt crowned in every run: {same}; intervals overlap pairwise: {overlap}"]
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

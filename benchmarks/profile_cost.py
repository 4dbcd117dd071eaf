"""What `--profile` costs per evaluation: the profiling pass after a correct verdict.

For a few bundled problems and their correct example candidates, the same candidate is judged
`--evaluations` times by one warm Evaluator (as an agent run judges its candidates), once with
profile off and once with it on, and once cold through `evaluate()` (what `kernelopt eval` does)
each way. Reported per problem: the mean wall time per warm evaluation and per cold one with and
without the pass, their ratio, and the pass's own time (EvalResult.durations["profile"]) on the
first profiled candidate (it also profiles the reference and counts the FLOPs) and on later ones
(the reference's part is kept; the reference worker is replaced once, beside the next load).

    nice -n 10 python benchmarks/profile_cost.py [--evaluations 3] [--timing-budget 2] [--device cpu]

Prints one JSON object: the machine and the numbers per problem.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernelopt.kernelbench import load_problem  # noqa: E402
from kernelopt.sandbox import EvalOptions, Evaluator, evaluate  # noqa: E402

CASES = (("1_ReLU", "1_ReLU/relu_clamp.py"), ("2_LinearGELU", "2_LinearGELU/addmm_gelu.py"),
         ("4_RedundantSoftmax", "4_RedundantSoftmax/drop_dead_work.py"))


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def warm(problem, source: str, options: EvalOptions, count: int) -> tuple[list[float], list[float]]:
    """Wall seconds of each of `count` evaluations by one Evaluator, and each pass's own time."""
    walls, passes = [], []
    with Evaluator(problem, options) as evaluator:
        for _ in range(count):
            begin = time.perf_counter()
            result = evaluator.evaluate(source)
            walls.append(time.perf_counter() - begin)
            if result.status != "correct":
                raise SystemExit(f"{problem.name}: the example candidate was judged {result.status}: {result.message}")
            passes.append(result.durations.get("profile", 0.0))
    return walls, passes


def cold(problem, source: str, options: EvalOptions) -> float:
    begin = time.perf_counter()
    evaluate(problem, source, options)
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=3, help="warm evaluations per mode and problem")
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    rows = {}
    for stem, candidate in CASES:
        problem = load_problem(REPO / "examples" / "level1" / f"{stem}.py")
        source = (REPO / "examples" / "candidates" / candidate).read_text()
        options = EvalOptions(device=args.device, timing_budget=args.timing_budget)
        profiled = options.model_copy(update={"profile": True})
        plain_walls, _ = warm(problem, source, options, args.evaluations)
        walls, passes = warm(problem, source, profiled, args.evaluations)
        plain_cold, profiled_cold = cold(problem, source, options), cold(problem, source, profiled)
        rows[stem] = {
            "warm_s": round(statistics.fmean(plain_walls), 3),
            "warm_profiled_s": round(statistics.fmean(walls), 3),
            "warm_ratio": round(statistics.fmean(walls) / statistics.fmean(plain_walls), 3),
            "cold_s": round(plain_cold, 3), "cold_profiled_s": round(profiled_cold, 3),
            "cold_ratio": round(profiled_cold / plain_cold, 3),
            "pass_first_s": round(passes[0], 3),
            "pass_later_s": round(statistics.fmean(passes[1:]), 3) if len(passes) > 1 else None,
        }
        print(f"{stem}: {rows[stem]}", file=sys.stderr)
    print(json.dumps({"machine": machine(), "device": args.device, "timing_budget": args.timing_budget,
                      "evaluations": args.evaluations, "problems": rows}, indent=1))


if __name__ == "__main__":
    main()

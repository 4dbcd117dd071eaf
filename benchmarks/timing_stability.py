"""Timing stability: the same kernel evaluated N times; the spread of the measured speedup.

An identical candidate (the reference's own code as ModelNew) should measure 1.0x, and its
95 % interval should contain 1.0; the spread across evaluations is the referee's noise floor,
and the share of intervals holding 1.0 says whether the interval is calibrated. Usage:

    .venv/bin/python benchmarks/timing_stability.py [--device cuda] [--runs 5] [--problem PATH]
        [--timing-budget S] [--timing-precision P] [--pin-timing auto|on|off] [--busy-cores N]

`--busy-cores N` keeps N processes spinning on the CPU for the whole run (an honest copy must
stay honest on a busy host: issue acceptance, one busy core beside the evaluation on the 2-core VM).

`--timing-precision 1e-9` turns the precision stop off (timing then stops only on the spread
rule, the sample cap or the budget): run it beside the default to see what the stop saves and
whether the spread across evaluations changes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
from pathlib import Path

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, evaluate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_identity import HONEST_RANGE, as_candidate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _spin() -> None:
    while True:
        pass


def busy_processes(count: int) -> list[multiprocessing.Process]:
    """`count` processes that keep one core each busy until terminated."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for spinner in spinners:
        spinner.start()
    return spinners


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--problem", default=str(REPO / "examples" / "level1" / "4_RedundantSoftmax.py"))
    parser.add_argument("--timing-budget", type=float, default=10.0)
    parser.add_argument("--timing-precision", type=float, default=0.05,
                        help="stop once the speedup's 95%% interval is within +-P (default 0.05)")
    parser.add_argument("--pin-timing", choices=["auto", "on", "off"], default="auto",
                        help="both workers' timed calls of a round on one CPU core (auto: on)")
    parser.add_argument("--busy-cores", type=int, default=0, help="processes spinning beside the evaluations")
    args = parser.parse_args()
    problem = load_problem(args.problem)
    identical = as_candidate(problem.source)
    options = EvalOptions(device=args.device, timing_budget=args.timing_budget, pin_timing=args.pin_timing,
                          target_precision=args.timing_precision)
    speedups, timing_seconds, covered, env = [], [], 0, None
    spinners = busy_processes(args.busy_cores)
    try:
        for run in range(args.runs):
            result = evaluate(problem, identical, options)
            assert result.status == "correct", result.message
            env = result.environment
            speedups.append(result.speedup)
            timing_seconds.append(result.durations["timing"])
            t = result.timing
            low, high = result.speedup * (1 - t.speedup_precision), result.speedup * (1 + t.speedup_precision)
            covered += low <= 1.0 <= high
            print(f"run {run}: speedup {result.speedup:.4f} +-{t.speedup_precision:.1%} "
                  f"({'holds' if low <= 1.0 <= high else 'misses'} 1.0)  reference {t.reference_ms:.4f} ms  "
                  f"candidate {t.candidate_ms:.4f} ms (means; reference capped by {t.reference_charge_ms:.4f}; "
                  f"wall-clock speedup {t.wall_speedup or float('nan'):.3f})  samples {t.candidate.samples} in "
                  f"{t.rounds} rounds  "
                  f"timing {result.durations['timing']:.2f} s", flush=True)
    finally:
        for spinner in spinners:
            spinner.terminate()
    within = sum(HONEST_RANGE[0] <= s <= HONEST_RANGE[1] for s in speedups)
    median = statistics.median(speedups)
    print(f"device: {env.device} {env.device_name}; torch {env.torch}, CUDA {env.cuda}, driver {env.driver}")
    print(f"identical kernel, {args.runs} evaluations, timing budget {args.timing_budget:g} s, "
          f"precision stop {args.timing_precision:g}, pin-timing {args.pin_timing}, busy cores {args.busy_cores}: "
          f"{within}/{args.runs} within {HONEST_RANGE[0]}-{HONEST_RANGE[1]}x, {covered}/{args.runs} intervals hold 1.0; "
          f"median speedup {median:.4f}, "
          f"range {min(speedups):.4f}-{max(speedups):.4f}, spread (max-min)/median "
          f"{(max(speedups) - min(speedups)) / median:.3%}; timing phase {statistics.fmean(timing_seconds):.2f} s "
          "per evaluation (mean)")


if __name__ == "__main__":
    main()

"""KernelBench's metrics over a problem set's results.

fast_p: the fraction of the set's problems whose result is correct with a speedup strictly above
p (fast_0: correct at all). The denominator is every problem in the set, so a problem with no
result (not run, failed, crashed) counts as a failure. geomean_speedup and
median_speedup are over the correct results only (None when there are none).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class ProblemOutcome:
    """The best verdict for one problem: correct or not, and its speedup when correct."""

    correct: bool
    speedup: float | None = None


def fast_p_key(p: float) -> str:
    """0.0 -> 'fast_0', 0.5 -> 'fast_0.5', 1.0 -> 'fast_1' (the names in --json summaries)."""
    return f"fast_{p:g}"


def summarize(problem_keys: Iterable, outcomes: Mapping) -> dict:
    """Metrics for the problems `problem_keys` (the whole set), given `outcomes` for those that
    have a result (keys absent from it count as failures)."""
    keys = list(problem_keys)
    if len(set(keys)) != len(keys):
        raise ValueError("a problem is listed twice")
    unknown = set(outcomes) - set(keys)
    if unknown:
        raise ValueError(f"outcomes for problems outside the set: {sorted(map(str, unknown))}")
    speedups = [o.speedup for k in keys if (o := outcomes.get(k)) and o.correct and _usable(o.speedup)]
    correct = sum(1 for k in keys if (o := outcomes.get(k)) and o.correct)
    summary: dict = {"n_problems": len(keys), "n_correct": correct, "n_missing": len(keys) - len(outcomes)}
    for p in FAST_P_THRESHOLDS:
        passing = correct if p == 0 else sum(1 for s in speedups if s > p)
        summary[fast_p_key(p)] = passing / len(keys) if keys else 0.0
    summary["geomean_speedup"] = geometric_mean(speedups)
    summary["median_speedup"] = statistics.median(speedups) if speedups else None
    return summary


def geometric_mean(values: list[float]) -> float | None:
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _usable(speedup: float | None) -> bool:
    return speedup is not None and math.isfinite(speedup) and speedup > 0

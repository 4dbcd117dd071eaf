"""KernelBench's metrics over a problem set's results.

fast_p: the fraction of the set's problems whose result is correct with a speedup strictly above
p (fast_0: correct at all). The denominator is every problem in the set, so a problem with no
result (not run, failed, crashed) counts as a failure. geomean_speedup and
median_speedup are over the correct results only (None when there are none).

Beyond KernelBench: the speedup distribution (problem counts in fixed buckets of the best
outcome's speedup, failures included, see SPEEDUP_BUCKETS), the optimization-kind breakdown (per
kind the referee labelled, the problems whose best correct outcome has it and their geometric
mean speedup), the fast_p curve on any grid, and the rule that picks a problem's best verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeGuard

FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class ProblemOutcome:
    """The best verdict for one problem: correct or not, its speedup when correct, and the
    referee's optimization kinds for it (kernelopt/sandbox/kinds.py)."""

    correct: bool
    speedup: float | None = None
    kinds: tuple[str, ...] = ()


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


def _usable(speedup: float | None) -> TypeGuard[float]:
    return speedup is not None and math.isfinite(speedup) and speedup > 0


# The speedup distribution's buckets: (name, lower, upper), each holding speedups in (lower, upper].
# Upper-inclusive like fast_p's strict "> p": fast_p * n_problems is the count of the buckets whose
# lower bound is at least p (for p among the edges). Problems without a correct outcome are
# "failed"; a correct outcome without a usable timing (none has been seen) is "untimed".
SPEEDUP_BUCKETS = (
    ("<=0.5", 0.0, 0.5),
    ("0.5-0.8", 0.5, 0.8),
    ("0.8-1", 0.8, 1.0),
    ("1-1.5", 1.0, 1.5),
    ("1.5-2", 1.5, 2.0),
    ("2-5", 2.0, 5.0),
    (">5", 5.0, math.inf),
)
DISTRIBUTION_KEYS = ("failed", *(name for name, _, _ in SPEEDUP_BUCKETS), "untimed")


def speedup_bucket(outcome: ProblemOutcome | None) -> str:
    """The distribution bucket of one problem's best outcome (None: no result)."""
    if outcome is None or not outcome.correct:
        return "failed"
    if not _usable(outcome.speedup):
        return "untimed"
    return next(name for name, lower, upper in SPEEDUP_BUCKETS if lower < outcome.speedup <= upper)


def speedup_distribution(problem_keys: Iterable, outcomes: Mapping) -> dict[str, int]:
    """Problem counts per bucket (every key of DISTRIBUTION_KEYS, in order; they sum to the
    number of problems; a problem absent from `outcomes` is failed)."""
    counts = dict.fromkeys(DISTRIBUTION_KEYS, 0)
    for key in problem_keys:
        counts[speedup_bucket(outcomes.get(key))] += 1
    return counts


def kind_breakdown(problem_keys: Iterable, outcomes: Mapping) -> dict[str, dict]:
    """Per optimization kind: how many problems' best outcome is correct and has that kind, and
    the geometric mean of those problems' speedups. Ordered by count, then name; a candidate
    usually has several kinds (e.g. pytorch and torch_compile), so counts overlap."""
    speedups: dict[str, list] = {}
    counts: dict[str, int] = {}
    for key in problem_keys:
        outcome = outcomes.get(key)
        if outcome is None or not outcome.correct:
            continue
        for kind in dict.fromkeys(outcome.kinds):
            counts[kind] = counts.get(kind, 0) + 1
            if _usable(outcome.speedup):
                speedups.setdefault(kind, []).append(outcome.speedup)
    order = sorted(counts, key=lambda kind: (-counts[kind], kind))
    return {kind: {"n_problems": counts[kind], "geomean_speedup": geometric_mean(speedups.get(kind, []))}
            for kind in order}


def fast_p_curve(problem_keys: Iterable, outcomes: Mapping, thresholds: Iterable[float]) -> list[float]:
    """fast_p at each threshold (as `summarize` computes it: p=0 means correct at all)."""
    keys = list(problem_keys)
    correct = [o for k in keys if (o := outcomes.get(k)) and o.correct]
    speedups = [o.speedup for o in correct if _usable(o.speedup)]
    if not keys:
        return [0.0 for _ in thresholds]
    return [(len(correct) if p == 0 else sum(1 for s in speedups if s > p)) / len(keys) for p in thresholds]


def is_better(a: ProblemOutcome, b: ProblemOutcome) -> bool:
    """Whether outcome a beats b as a problem's best: correct first, then the higher speedup."""
    if a.correct != b.correct:
        return a.correct
    return (a.speedup or 0.0) > (b.speedup or 0.0)


def best_per_problem(records: Iterable[Mapping]) -> dict[tuple, Mapping]:
    """Each problem's best verdict record, keyed (level, problem_id). Records are mappings with
    level, problem_id, correct and speedup (as in a bench run's results.jsonl); a record with a
    "kind" other than "agent" (e.g. a health probe) is no verdict and is skipped. Ties keep the
    earlier record."""
    best: dict[tuple, Mapping] = {}
    for record in records:
        if record.get("kind") not in (None, "agent"):
            continue
        key = (record["level"], record["problem_id"])
        if key not in best or is_better(outcome_of(record), outcome_of(best[key])):
            best[key] = record
    return best


def outcome_of(record: Mapping) -> ProblemOutcome:
    """A verdict record (see best_per_problem) as a ProblemOutcome, its kinds included."""
    return ProblemOutcome(bool(record["correct"]), record.get("speedup"),
                          tuple(record.get("optimization_kinds") or ()))

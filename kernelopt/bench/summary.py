"""KernelBench's metrics per level over a pass's records: each problem's best outcome, fast_p and
the speedups per level and overall, the speedup distribution and the optimization kinds, and the
same metrics against baselines (`kernelopt bench --baselines`). The metrics themselves are
defined in kernelopt/kernelbench/metrics.py; this module applies them to a set's records.
"""

from __future__ import annotations

from kernelopt.bench.baselines import measure_baselines
from kernelopt.kernelbench import ProblemError, ProblemSet
from kernelopt.kernelbench.metrics import (
    ProblemOutcome, best_per_problem, kind_breakdown, outcome_of, speedup_distribution, summarize,
)
from kernelopt.sandbox import EvalOptions


def summarize_results(problem_set: ProblemSet, records) -> dict:
    """KernelBench metrics per level over the set's problems, from each problem's best sample,
    with the speedup distribution and the optimization-kind breakdown (same shape: levels and
    overall)."""
    return level_summary(problem_set, *best_outcomes(records))


def level_summary(problem_set: ProblemSet, best: dict, health: dict) -> dict:
    summary = _per_level(problem_set, best)
    summary["health"] = health
    summary["speedup_distribution"] = _per_level(problem_set, best, speedup_distribution)
    summary["optimization_kinds"] = _per_level(problem_set, best, kind_breakdown)
    return summary


def against_baselines(problem_set: ProblemSet, best: dict, names: list[str], options: EvalOptions, store,
                      report, pool=None) -> dict:
    """The same metrics with each correct speedup divided by the baseline's speedup over eager
    (a baseline that is not correct itself counts as eager). Baselines are measured only for
    problems with a correct solution: the others fail against any baseline. `best`: each
    problem's best outcome, as best_outcomes gives it; `pool`: measured on a cluster's actors."""
    measured = {}
    for problem in problem_set:
        outcome = best.get((problem.level, problem.problem_id))
        if outcome and outcome.correct:
            key = (problem.level, problem.problem_id)
            try:
                measured[key] = measure_baselines(problem, names, options, options.device, store, report, pool=pool)
            except ProblemError as exc:  # cannot happen for a reference that judged a sample; be safe
                report(f"level {problem.level} problem {problem.problem_id}: no baselines: {exc}")
                measured[key] = {name: {"status": "problem_error", "speedup_vs_eager": None} for name in names}
    result = {}
    for name in names:
        relative = {}
        for key, outcome in best.items():
            if outcome.correct and outcome.speedup:
                base = measured[key][name]
                factor = base["speedup_vs_eager"] if base["status"] == "correct" and base["speedup_vs_eager"] else 1.0
                relative[key] = ProblemOutcome(True, outcome.speedup / factor)
            else:
                relative[key] = outcome
        result[name] = _per_level(problem_set, relative)
    return result


class MixedDevicesError(ValueError):
    """A pass's verdicts were measured on different device models and no one asked to mix them."""


def device_sections(problem_set: ProblemSet, records, mix: bool) -> dict:
    """The device models the verdicts were measured on ("device_models"), and when there are
    several, the metrics per model ("by_device_model"): a speedup measured on one GPU model
    means little next to one from another, so a pass that mixes models raises
    MixedDevicesError unless `mix` (--ray-mix-devices) asks for the mixed overall numbers."""
    records = list(records)
    models = sorted({r["device_model"] for r in records if r.get("device_model") and r.get("kind") != "health"})
    if len(models) <= 1:
        return {"device_models": models}
    if not mix:
        raise MixedDevicesError(f"the verdicts were measured on {len(models)} device models ({'; '.join(models)}): "
                                "their speedups do not make one number. Rerun with --ray-mix-devices for the "
                                "metrics per model (and mixed overall), or judge on one model (another --out)")
    return {"device_models": models, "by_device_model": {
        model: summarize_results(problem_set, [r for r in records if r.get("kind") == "health"
                                               or r.get("device_model") == model])
        for model in models}}


def best_outcomes(records) -> tuple[dict, dict]:
    """Each problem's best outcome (kinds included), and the health flags of flagged problems."""
    records = list(records)
    health = {f"{r['level']}/{r['problem_id']}": r["flags"] for r in records
              if r.get("kind") == "health" and r["flags"]}
    best = {key: outcome_of(record) for key, record in best_per_problem(records).items()}
    return best, health


def _per_level(problem_set: ProblemSet, best: dict, metric=summarize) -> dict:
    levels = {}
    for level in problem_set.levels():
        keys = [(p.level, p.problem_id) for p in problem_set if p.level == level]
        levels[str(level)] = metric(keys, {k: best[k] for k in keys if k in best})
    all_keys = [(p.level, p.problem_id) for p in problem_set]
    return {"levels": levels, "overall": metric(all_keys, {k: best[k] for k in all_keys if k in best})}



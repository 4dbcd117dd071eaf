"""One verdict from several input configurations (a problem with SHAPES, kernelbench/shapes.py).

Each configuration is judged as its own problem, by the same referee, in order; the first that
is not correct ends the evaluation and decides the verdict, which names it. When every one is
correct the speedup is the geometric mean of theirs: the mean of the reference's per-call times
and of the candidate's are each taken geometrically, so their ratio is exactly that mean and
`Timing.speedup` stays reference_ms / candidate_ms. Its interval combines theirs in log space:
the configurations are timed independently, so the variances of the log speedups add, and the
mean's is their sum over n squared.
"""

from __future__ import annotations

import math

from kernelopt.kernelbench.shapes import Shape
from kernelopt.sandbox import physics
from kernelopt.sandbox.results import Check, EvalOptions, EvalResult, Passes, PassSpeedup, ShapeVerdict, merged_labels


def options_for(options: EvalOptions, count: int) -> EvalOptions:
    """Each configuration's options: the timing budget is shared among them, so a problem with
    several costs about what one does."""
    return options.model_copy(update={"timing_budget": options.timing_budget / max(1, count)})


def combine(parts: list[tuple[object, EvalResult]], selected: int) -> EvalResult:
    """The verdict on all configurations from each judged one's, in judging order (the last
    judged is the first that failed, if any); `selected`: how many were to be judged."""
    judged = [(shape, result) for shape, result in parts if isinstance(shape, Shape)]
    verdicts = [_shape_verdict(shape, result) for shape, result in judged]
    failed = [(shape, result) for shape, result in judged if not result.correct]
    if failed:
        shape, result = failed[0]
        combined = result.model_copy(deep=True)
        combined.message = f"on configuration {_label(shape)}: {result.message}"
    else:
        combined = _geometric_mean(judged)
    combined.shapes = verdicts
    combined.flags, combined.rules = merged_labels([r for _, r in judged])
    combined.optimization_kinds = list(dict.fromkeys(k for _, r in judged for k in r.optimization_kinds))
    combined.durations = _summed(r.durations for _, r in judged)
    combined.checks.append(Check(name="shapes", passed=not failed, detail=_checked(verdicts, selected)))
    return combined


def _geometric_mean(judged: list[tuple[Shape, EvalResult]]) -> EvalResult:
    results = [result for _, result in judged]
    combined = results[0].model_copy(deep=True)
    timing = combined.timing
    if timing is None or any(r.timing is None for r in results):  # a correct verdict always has a timing
        return combined
    timings = [r.timing for r in results if r.timing is not None]
    timing.reference_ms = _geomean([t.reference_ms for t in timings])
    timing.candidate_ms = _geomean([t.candidate_ms for t in timings])
    timing.speedup_precision = _combined_precision([t.speedup_precision for t in timings])
    walls = [t.wall_speedup for t in timings]
    timing.wall_speedup = _geomean([w for w in walls if w is not None]) if None not in walls else None
    timing.remeasured = any(t.remeasured for t in timings)
    timing.method += f"; geometric mean over {len(timings)} input configurations (each in `shapes`)"
    physics.combined_floor(timing, timings)
    combined.passes = _passes_geomean([r.passes for r in results])
    combined.speedup = timing.speedup
    combined.reference_ms, combined.candidate_ms = timing.reference_ms, timing.candidate_ms
    combined.trials = [trial for r in results for trial in r.trials]
    per_shape = ", ".join(f"{_label(s)} {r.speedup:.3f}x" for s, r in judged if r.speedup is not None)
    combined.message = (f"correct on {_configurations(len(results))}; geometric-mean speedup "
                        f"{combined.speedup:.3f}x" + (f" +-{timing.speedup_precision:.1%}"
                                                      if timing.speedup_precision is not None else "")
                        + f" ({per_shape})")
    return combined


def prompt_view(result: EvalResult) -> EvalResult:
    """The verdict as a prompt, an agent tool or an RL environment may show it to the model:
    nothing of a held-out configuration but that it was judged (its name, sizes, errors, trials
    and output could teach the search the very sizes it must not tune to)."""
    held = [v for v in result.shapes or [] if v.held_out]
    if not held:
        return result
    shown = [v for v in result.shapes or [] if not v.held_out]
    view = result.model_copy(deep=True)
    view.shapes = shown
    failed_held = next((v for v in held if v.status != "correct"), None)
    if failed_held is not None and all(v.status == "correct" for v in shown):
        view.message = (f"{failed_held.status} on a held-out input configuration (judged, never shown); correct on "
                        f"the {len(shown)} shown. Make the program right for every size the reference accepts, "
                        "not only the ones in the problem file.")
        view.trials, view.compile_log, view.candidate_output = [], "", ""
    elif result.correct:
        per_shape = ", ".join(f"[{v.name}] {v.speedup:.3f}x" for v in shown if v.speedup is not None)
        view.message = (f"correct on all {len(shown) + len(held)} input configurations ({len(held)} held out, not "
                        f"shown); geometric-mean speedup {result.speedup:.3f}x; shown: {per_shape}")
    return view


def _passes_geomean(each: list[Passes | None]) -> Passes | None:
    """A training problem's passes over the configurations: each pass's geometric mean (where
    every configuration has it), as the verdict's speedup is the step's."""
    if not each or any(p is None for p in each):
        return None
    found = [p for p in each if p is not None]

    def mean(parts: list[PassSpeedup | None]) -> PassSpeedup | None:
        if any(part is None or part.speedup is None or not part.reference_ms or not part.candidate_ms
               for part in parts):
            return None
        return PassSpeedup(reference_ms=_geomean([p.reference_ms for p in parts]),  # type: ignore[misc, union-attr]
                           candidate_ms=_geomean([p.candidate_ms for p in parts]),  # type: ignore[misc, union-attr]
                           speedup=_geomean([p.speedup for p in parts]),  # type: ignore[misc, union-attr]
                           speedup_precision=_combined_precision([p.speedup_precision for p in parts]))  # type: ignore[union-attr]

    step = mean([p.step for p in found])
    if step is None:
        return None
    return Passes(forward=mean([p.forward for p in found]), backward=mean([p.backward for p in found]), step=step)


def _configurations(count: int) -> str:
    return "its one selected input configuration" if count == 1 else f"all {count} input configurations"


def _shape_verdict(shape: Shape, result: EvalResult) -> ShapeVerdict:
    timing = result.timing if result.correct else None
    return ShapeVerdict(name=shape.name, held_out=shape.held_out, status=result.status, message=result.message,
                        speedup=result.speedup if result.correct else None,
                        speedup_precision=timing.speedup_precision if timing is not None else None,
                        reference_ms=result.reference_ms if result.correct else None,
                        candidate_ms=result.candidate_ms if result.correct else None)


def _label(shape: Shape) -> str:
    return f"[{shape.name}]" + (" (held out)" if shape.held_out else "")


def _checked(verdicts: list[ShapeVerdict], selected: int) -> str:
    held = sum(v.held_out for v in verdicts)
    detail = f"{sum(v.status == 'correct' for v in verdicts)} of {selected} input configurations correct"
    if len(verdicts) < selected:
        detail += f" (judging stopped at the first that was not; {selected - len(verdicts)} not judged)"
    return detail + (f"; {held} held out of the prompt" if held else "")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _combined_precision(precisions: list[float | None]) -> float | None:
    """The geometric mean's relative half-interval: log-space half-widths in quadrature, over n."""
    if not precisions or any(p is None for p in precisions):
        return None
    log_half_width = math.sqrt(sum(math.log1p(p) ** 2 for p in precisions if p is not None)) / len(precisions)
    return math.expm1(log_half_width)


def _summed(durations) -> dict[str, float]:
    total: dict[str, float] = {}
    for one in durations:
        for key, seconds in one.items():
            total[key] = round(total.get(key, 0.0) + seconds, 4)
    return total

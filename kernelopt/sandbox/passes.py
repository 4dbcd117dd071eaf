"""One verdict from a training problem's passes (kernelbench/training.py): the forward alone
(with `--pass both`) and the training step (forward and backward, outputs and gradients).

The first part that is not correct decides, its message saying which. When both are correct the
verdict is the step's (its speedup is the training step's, forward plus backward, what a
training run pays), and `passes` gives each: the forward's and the step's as measured, and the
backward's as the difference of the two (each side's step time less its forward time), which
rests on two evaluations and so has no interval of its own.
"""

from __future__ import annotations

from kernelopt.kernelbench import training
from kernelopt.sandbox.results import Check, EvalResult, PassSpeedup, Passes, merged_labels

_LABELS = {"forward": "in the forward pass", "step": "in the training step (forward and backward, outputs and "
                                                     "gradients)"}


_STEP_OUTPUTS = (" (the step's outputs, in order: the forward's outputs, then the gradients of the floating-point "
                 "inputs, then those of the parameters in Model.parameters() order)")


def candidate_step(source: str) -> str:
    """The candidate's source as the training step judges it."""
    return training.candidate_source(source)


def combine(judged: list[tuple[object, EvalResult]]) -> EvalResult:
    """The verdict on the passes from each judged part's (in order: "forward" first if judged,
    then "step")."""
    by_part = {str(key): result for key, result in judged}
    failed = next(((str(key), r) for key, r in judged if not r.correct), None)
    if failed is not None:
        key, result = failed
        combined = result.model_copy(deep=True)
        combined.message = f"{_LABELS[key]}: {result.message}" + (_STEP_OUTPUTS if key == "step" else "")
    else:
        combined = by_part["step"].model_copy(deep=True)
        combined.passes = _passes(by_part.get("forward"), by_part["step"])
        combined.message = _message(combined.passes, combined.message)
    combined.flags, combined.rules = merged_labels([r for _, r in judged])
    combined.checks.append(Check(name="passes", passed=failed is None,
                                 detail=", ".join(f"{key}: {r.status}" for key, r in judged)))
    return combined


def _passes(forward: EvalResult | None, step: EvalResult) -> Passes:
    return Passes(forward=_measured(forward) if forward is not None else None, step=_measured(step),
                  backward=_difference(forward, step) if forward is not None else None)


def _measured(result: EvalResult) -> PassSpeedup:
    precision = result.timing.speedup_precision if result.timing is not None else None
    return PassSpeedup(speedup=result.speedup, reference_ms=result.reference_ms, candidate_ms=result.candidate_ms,
                       speedup_precision=precision)


def _difference(forward: EvalResult, step: EvalResult) -> PassSpeedup | None:
    """The backward's times as each side's step less its forward; None where either is not
    positive (a backward lost in the noise of the two measurements)."""
    times = (step.reference_ms, forward.reference_ms, step.candidate_ms, forward.candidate_ms)
    if any(t is None for t in times):
        return None
    reference = step.reference_ms - forward.reference_ms  # type: ignore[operator]
    candidate = step.candidate_ms - forward.candidate_ms  # type: ignore[operator]
    if reference <= 0 or candidate <= 0:
        return None
    return PassSpeedup(speedup=reference / candidate, reference_ms=reference, candidate_ms=candidate)


def _message(found: Passes, step_message: str) -> str:
    parts = [f"{name} {p.speedup:.3f}x" for name, p in (("forward", found.forward), ("backward", found.backward),
                                                        ("training step", found.step))
             if p is not None and p.speedup is not None]
    return f"outputs and gradients correct; {', '.join(parts)} (the verdict's speedup: the step's). {step_message}"

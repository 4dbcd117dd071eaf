"""A problem judged as several plain problems derived from it: its input configurations
(kernelbench/shapes.py, combined by shaped.py) and its training passes (kernelbench/training.py,
combined by passes.py).

Each part is a plain problem with an Evaluator of its own, judged by the same referee, every rule
included; the parts are judged in order and the first that is not correct ends the evaluation.
Configurations come first, and each configuration's part plans its own passes, so a problem with
both is judged configuration by configuration, each as its forward and its training step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kernelopt.kernelbench import Problem
from kernelopt.kernelbench.shapes import Shape, ShapeError
from kernelopt.kernelbench.shapes import select as select_shapes
from kernelopt.kernelbench.training import effective_pass
from kernelopt.sandbox import passes, shaped
from kernelopt.sandbox.results import EvalOptions, EvalResult

# (problem, options) -> an Evaluator for that plain part (batch.py passes its own constructor).
MakeEvaluator = Callable[[Problem, EvalOptions], "PartEvaluator"]


class PartEvaluator(Protocol):
    """What a part needs of its Evaluator (batch.Evaluator)."""

    workers_used: list

    def evaluate(self, source: str) -> EvalResult: ...
    def health(self) -> dict: ...
    def probe_reference(self, seeds: list[int]) -> list[dict]: ...
    def close(self, at_once: bool = False) -> None: ...


@dataclass
class Part:
    key: object                           # a Shape, or a pass: "forward", "step"
    evaluator: PartEvaluator
    candidate: Callable[[str], str]       # the candidate's source as this part judges it


class Parts:
    """The parts of one problem, judged in order, and how their verdicts combine."""

    def __init__(self, parts: list[Part], combine: Callable[[list[tuple[object, EvalResult]]], EvalResult]):
        self.parts, self._combine = parts, combine

    def evaluate(self, source: str, workers_used: list) -> EvalResult:
        judged: list[tuple[object, EvalResult]] = []
        for part in self.parts:
            result = part.evaluator.evaluate(part.candidate(source))
            judged.append((part.key, result))
            workers_used.extend(part.evaluator.workers_used[-1:])
            if not result.correct:
                break
        return self._combine(judged)

    def health(self) -> dict:
        """The first unhealthy part's health (else the first part's), named by its part."""
        reports = []
        for part in self.parts:
            report = {**part.evaluator.health(), "part": _name(part.key)}
            if not report.get("healthy", True):
                return report
            reports.append(report)
        return reports[0]

    def probe_reference(self, seeds: list[int]) -> list[dict]:
        return self.parts[0].evaluator.probe_reference(seeds)

    def close(self, at_once: bool = False) -> None:
        for part in self.parts:
            part.evaluator.close(at_once)


def plan(problem: Problem, options: EvalOptions, make: MakeEvaluator) -> Parts | None:
    """The parts `problem` is judged as under `options`, or None for a plain forward problem.
    Raises ValueError (ShapeError) for a --shapes selection the problem cannot give."""
    if not problem.shapes:
        select_shapes([Shape(())], options.shapes)  # a plain problem is one configuration: ShapeError otherwise
        if options.shapes == "held-out":
            raise ShapeError("--shapes held-out: the problem declares no held-out configuration (HELD_OUT_SHAPES)")
    if problem.shapes:
        chosen = select_shapes(list(problem.shapes), options.shapes)
        each = shaped.options_for(options, len(chosen))
        return Parts([Part(shape, make(problem.for_shape(shape), each), _same) for shape in chosen],
                     lambda judged: shaped.combine(judged, len(chosen)))
    judged_pass = effective_pass(options.training_pass, problem.training_pass)
    if judged_pass == "forward":
        return None
    steps = ["forward", "step"] if judged_pass == "both" else ["step"]
    each = options.model_copy(update={"timing_budget": options.timing_budget / len(steps),
                                      "training_pass": "forward"})
    parts = [Part("forward", make(problem, each), _same) if step == "forward"
             else Part("step", make(problem.for_training(), each), passes.candidate_step)
             for step in steps]
    return Parts(parts, passes.combine)


def _same(source: str) -> str:
    return source


def _name(key: object) -> str:
    return getattr(key, "name", None) or str(key)

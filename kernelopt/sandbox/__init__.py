"""Isolated compile + run of candidates and the referee's verdict (see DESIGN.md).

Heavy imports (torch) happen on first use, so `kernelopt --help` stays fast.
"""

from kernelopt.sandbox.results import EvalOptions, EvalResult, Judge

__all__ = ["EvalOptions", "EvalResult", "Evaluator", "Judge", "evaluate"]


def evaluate(problem, candidate_source, options=None):
    """Judge a candidate against a problem's reference (kernelopt.sandbox.batch.evaluate)."""
    from kernelopt.sandbox.batch import evaluate as _evaluate

    return _evaluate(problem, candidate_source, options)


def __getattr__(name):
    if name == "Evaluator":  # judges many candidates of one problem; see kernelopt.sandbox.batch
        from kernelopt.sandbox.batch import Evaluator

        return Evaluator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

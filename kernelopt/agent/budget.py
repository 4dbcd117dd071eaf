"""One budget shared by every strategy: LLM calls, tokens, cost, evaluations, wall time, and an
early stop at a target speedup.

Calls and evaluations are *reserved* before they start, so concurrent work never exceeds them.
Tokens and cost are only known afterwards: they are checked before each new call, so calls
already in flight may go past them by at most what those calls use. Wall time likewise stops
new work; work in flight finishes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass
class BudgetLimits:
    llm_calls: int | None = 8
    tokens: int | None = None
    cost: float | None = None          # US dollars; needs a price for the model
    evaluations: int | None = None
    wall_seconds: float | None = None
    target_speedup: float | None = None


class Budget:
    def __init__(self, limits: BudgetLimits, clock=time.monotonic):
        self.limits = limits
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self.calls = 0          # reserved (started or finished)
        self.evaluations = 0    # reserved
        self.tokens = 0
        self.cost = 0.0
        self.best_speedup: float | None = None
        self._stop_reason: str | None = None

    def elapsed(self) -> float:
        return self._clock() - self._started

    def stop_reason(self) -> str | None:
        """Why no new work may start, or None while it may."""
        with self._lock:
            return self._check()

    def _check(self, calls: bool = True) -> str | None:
        if self._stop_reason:
            return self._stop_reason
        lim = self.limits
        if lim.target_speedup is not None and self.best_speedup is not None \
                and self.best_speedup >= lim.target_speedup:
            return f"target speedup {lim.target_speedup:g}x reached ({self.best_speedup:.3g}x)"
        if calls and lim.llm_calls is not None and self.calls >= lim.llm_calls:
            return f"LLM call budget spent ({lim.llm_calls})"
        if lim.tokens is not None and self.tokens >= lim.tokens:
            return f"token budget spent ({self.tokens} of {lim.tokens})"
        if lim.cost is not None and self.cost >= lim.cost:
            return f"cost budget spent (${self.cost:.4f} of ${lim.cost:g})"
        if lim.evaluations is not None and self.evaluations >= lim.evaluations:
            return f"evaluation budget spent ({lim.evaluations})"
        if lim.wall_seconds is not None and self.elapsed() >= lim.wall_seconds:
            return f"wall-time budget spent ({lim.wall_seconds:g} s)"
        return None

    def reserve_attempt(self) -> bool:
        """One LLM call and (possibly) one evaluation: both must be available."""
        return self._reserve(evaluations=1)

    def reserve_call(self) -> bool:
        """An LLM call that leads to no evaluation (a critique)."""
        return self._reserve(evaluations=0)

    def reserve_evaluation(self, asked: bool = False) -> bool:
        """An evaluation with no LLM call of its own (code written by hand in an interactive
        session; `asked`: a tool call of a reply already counted, so the call limit, which that
        reply may have reached, does not refuse it)."""
        return self._reserve(evaluations=1, calls=0, check_calls=not asked)

    def _reserve(self, evaluations: int, calls: int = 1, check_calls: bool = True) -> bool:
        with self._lock:
            if self._check(check_calls):
                return False
            self.calls += calls
            self.evaluations += evaluations
            return True

    def release_evaluation(self) -> None:
        """The attempt needed no evaluation (no code, a duplicate, a failed call)."""
        with self._lock:
            self.evaluations -= 1

    def add_usage(self, tokens: int, cost: float | None) -> None:
        with self._lock:
            self.tokens += tokens
            self.cost += cost or 0.0

    def record_speedup(self, speedup: float) -> None:
        with self._lock:
            if self.best_speedup is None or speedup > self.best_speedup:
                self.best_speedup = speedup

    def stop(self, reason: str) -> None:
        """Stop for a reason outside the limits (a fatal endpoint error, an interrupt)."""
        with self._lock:
            self._stop_reason = self._stop_reason or reason

"""The stop rule, as a named unit: when the interleaved rounds have measured enough.

Timing stops at the first of: the evaluation's deadline is near; the call cap (after the
minimum of rounds); or, once the minimum of calls and rounds is reached, the speedup's
rounds-only precision (ratio_precision of the sides' means) is within the target, or
the timing budget is spent. More rounds cannot shrink the between-process part of the
interval (calibrated_precision), so the stop looks at the rounds' part alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelopt.sandbox.records import Round
from kernelopt.sandbox.timing.means import side_means
from kernelopt.sandbox.timing.stats import ratio_precision

MIN_ROUNDS = 3  # interleaving: no single round (one slow moment of one side) decides
DEADLINE_MARGIN_S = 1.0  # what the verdict's assembly may still need before the deadline


@dataclass(frozen=True)
class StopRule:
    """When to stop: `done(rounds, now)` after each measured round (each expected to take round_s)."""

    min_calls: int
    max_calls: int
    target_precision: float
    budget_end: float  # monotonic time the timing budget ends
    deadline: float  # the evaluation's deadline (monotonic)
    round_s: float
    device: str = "cpu"

    def done(self, rounds: list[Round], now: float) -> bool:
        if now + self.round_s > self.deadline - DEADLINE_MARGIN_S:
            return True
        calls = sum(len(c.ms) for c, _ in rounds)
        if calls >= self.max_calls and len(rounds) >= MIN_ROUNDS:
            return True
        if calls < self.min_calls or len(rounds) < MIN_ROUNDS:
            return False
        cand_means, ref_means = side_means([c for c, _ in rounds], [r for _, r in rounds])
        precise = ratio_precision(ref_means, cand_means) <= self.target_precision
        out_of_time = now + self.round_s > min(self.budget_end, self.deadline - DEADLINE_MARGIN_S)
        return precise or out_of_time

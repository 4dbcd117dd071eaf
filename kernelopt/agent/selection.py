"""Which candidate leads a search, when every speedup is a noisy measurement.

The best of many noisy readings is biased upward (the winner's curse): identical code read
1.97x, then 2.70x, and a search that keeps the maximum crowns whichever reading was luckiest.
So the search ranks candidates by the lower end of each speedup's 95 % interval
(`conservative_speedup`), and a candidate that would take the lead is judged a second time at
once, keeping the lower of its two readings (`confirmed`, in attempt.py's pipeline). The run's
best (`leader`) changes only to a candidate whose interval's lower end is above the leader's
reading. The verdict's own speedup is what reports and rewards show; the rank only orders
candidates.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from kernelopt.sandbox.results import EvalResult


class Ranked(Protocol):
    """What `leader` reads of an attempt (attempt.py's Attempt)."""

    @property
    def index(self) -> int: ...
    @property
    def correct(self) -> bool: ...
    @property
    def rank(self) -> float: ...
    @property
    def score(self) -> float: ...


A = TypeVar("A", bound=Ranked)


def conservative_speedup(result: EvalResult) -> float:
    """The lower end of a correct verdict's 95 % speedup interval (its speedup where the verdict
    has no interval); 0 for any other verdict."""
    if not result.correct or result.speedup is None:
        return 0.0
    precision = result.timing.speedup_precision if result.timing is not None else None
    return result.speedup * (1.0 - precision) if precision is not None else result.speedup


def leader(attempts: Iterable[A]) -> A | None:
    """The run's best candidate: the first correct one, replaced, in the order they were
    proposed, by any later one whose interval's lower end lies above the leader's own reading.
    That one is clearly faster. A near-tie leaves the lead where it was, so the same answers crown
    the same candidate however the readings fall."""
    best: A | None = None
    for attempt in sorted((a for a in attempts if a.correct), key=lambda a: a.index):
        if best is None or attempt.rank > best.score:
            best = attempt
    return best


def confirmed(first: EvalResult, second: EvalResult) -> EvalResult:
    """Of two verdicts on the same code, the one to keep: the lower reading (an incorrect second
    verdict wins: the code is not reliably correct). The point reading decides, not the interval's
    lower end: a wide interval around a lucky high reading must not keep that reading. The kept
    verdict lists both readings in `timing.speedups_measured` and says that it was confirmed."""
    kept = second if _reading(second) < _reading(first) else first
    readings = [r.speedup for r in (first, second) if r.correct and r.speedup is not None]
    kept = kept.model_copy(deep=True)
    if kept.timing is not None:
        kept.timing.speedups_measured = [round(s, 6) for s in readings]
    if kept.correct:
        kept.message += (f" (judged twice as a new leader: {', '.join(f'{s:.3f}x' for s in readings)}; "
                         "the lower reading kept)")
    return kept


def _reading(result: EvalResult) -> float:
    """A verdict's speedup for `confirmed`: 0 for any verdict that is not correct."""
    return result.speedup if result.correct and result.speedup is not None else 0.0

"""Which candidate leads a search, when every speedup is a noisy measurement.

The best of many noisy readings is biased upward (the winner's curse): identical code read
1.97x, then 2.70x, and a search that keeps the maximum crowns whichever reading was luckiest.
So the search ranks candidates by the lower end of each speedup's 95 % interval
(`conservative_speedup`). A candidate that would take the lead is measured head to head with
the leader (`head_to_head`, in attempt.py's pipeline): judged a second time, with the leader
judged again between its two readings, so both are read under the same conditions of the
machine. The challenger keeps the lower of its readings; the leader's fresh reading joins its
own. The run's best (`leader`) changes only to a candidate whose interval's lower end lies above
the higher of the leader's readings: a machine that grew quieter since the leader was judged
does not crown the challenger. The verdict's own speedup is what reports and rewards show; the
rank only orders candidates.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from kernelopt.sandbox.results import EvalResult, HeadToHead


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
    @property
    def code_hash(self) -> str | None: ...
    @property
    def head_to_head(self) -> HeadToHead | None: ...


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
    proposed, by any later one whose interval's lower end lies above the leader's reading (the
    higher of its own and the one taken head to head with that challenger). That one is clearly
    faster. A near-tie leaves the lead where it was, so the same answers crown the same candidate
    however the readings fall."""
    best: A | None = None
    for attempt in sorted((a for a in attempts if a.correct), key=lambda a: a.index):
        if best is None or attempt.rank > _bar(best, attempt):
            best = attempt
    return best


def _bar(best: Ranked, challenger: Ranked) -> float:
    """What `challenger` must clear to lead: the leader's reading, or its fresh one beside the
    challenger where they were measured head to head, whichever is higher."""
    fresh = challenger.head_to_head
    if fresh is not None and fresh.code_hash == best.code_hash and fresh.speedup is not None:
        return max(best.score, fresh.speedup)
    return best.score


def head_to_head(first: EvalResult, second: EvalResult, incumbent: HeadToHead | None = None) -> EvalResult:
    """Of two verdicts on the same code, the one to keep: the lower reading (an incorrect second
    verdict wins: the code is not reliably correct). The point reading decides, not the interval's
    lower end: a wide interval around a lucky high reading must not keep that reading. The kept
    verdict lists both readings in `timing.speedups_measured`, the leader's fresh reading taken
    between them in `timing.incumbent`, and says so in its message."""
    kept = second if _reading(second) < _reading(first) else first
    readings = [r.speedup for r in (first, second) if r.correct and r.speedup is not None]
    kept = kept.model_copy(deep=True)
    if kept.timing is not None:
        kept.timing.speedups_measured = [round(s, 6) for s in readings]
        kept.timing.incumbent = incumbent
    if kept.correct:
        against = ""
        if incumbent is not None:
            fresh = f"{incumbent.speedup:.3f}x" if incumbent.speedup is not None else "not correct"
            against = f", the leader (attempt {incumbent.index}) read {fresh} between them"
        kept.message += (f" (judged twice as a new leader: {', '.join(f'{s:.3f}x' for s in readings)}{against}; "
                         "the lower reading kept)")
    return kept


def _reading(result: EvalResult) -> float:
    """A verdict's speedup for `head_to_head`: 0 for any verdict that is not correct."""
    return result.speedup if result.correct and result.speedup is not None else 0.0

"""Each side's time per call, round by round: what the speedup and the stop rule are made of.

Every call's time is the host's (calls.py: the group's CPU time on a CPU, else the wall clock
around the call's window), taken the same way on both sides, so nothing is allowed for the
harness's work or charged for it: the loop inside the window is the same code on both sides and
in both times. Two corrections, each of which can only lower a speedup: where the CPU time
decides, a candidate's call that spent longer blocked than the reference's calls do (sleeping,
waiting on a lock or a pipe: the kernel's accounting, not the candidate's) takes that time too;
and a round the host disturbed (preempted during the trusted reference's calls) is capped.
"""

from __future__ import annotations

import statistics

from kernelopt.sandbox.records import SideRound
from kernelopt.sandbox.timing.stats import percentile

# A round of the reference whose mean is more than this over the lower quartile of its rounds was
# disturbed (the host preempted the trusted reference during its calls): it is capped there.
REFERENCE_ROUND_CAP = 1.25


def capped_reference_means(means: list[float]) -> list[float]:
    """The reference's round means, each at most REFERENCE_ROUND_CAP times the lower quartile of
    them all. Time added to the reference raises the speedup, and on a busy host preemption
    inside the reference's calls adds wall time, so a disturbed round counts only as much as a
    quiet one. Capping only ever lowers the reference, so it can only lower a speedup; the
    candidate is frozen during the reference's turns and decides nothing about it, and its own
    disturbed rounds count against it in full."""
    if len(means) < 2:
        return list(means)
    ceiling = REFERENCE_ROUND_CAP * percentile(sorted(means), 0.25)
    return [min(mean, ceiling) for mean in means]


# How much of the reference's per-call blocked time counts as the harness's own (its wake-ups and
# pipe waits inside the window, which the candidate's calls show alike): this quantile of it.
BLOCKED_FLOOR_QUANTILE = 0.9


def blocked_floor(ref: list[SideRound]) -> float | None:
    """The blocked time per call that the thin loop itself shows, from the trusted reference's
    calls (ms; None where it was not measured)."""
    blocked = sorted(ms for side in ref for ms in side.blocked_ms)
    return percentile(blocked, BLOCKED_FLOOR_QUANTILE) if blocked else None


def candidate_call_ms(side: SideRound, floor: float | None) -> list[float]:
    """The candidate's calls: where the CPU time decides, each call plus the time it spent
    blocked beyond the reference's floor (a call that sleeps, or waits for something, takes that
    long whatever its CPU time)."""
    if floor is None or len(side.blocked_ms) != len(side.ms):
        return list(side.ms)
    return [ms + max(0.0, blocked - floor) for ms, blocked in zip(side.ms, side.blocked_ms)]


def side_means(cand: list[SideRound], ref: list[SideRound]) -> tuple[list[float], list[float]]:
    """Each side's mean ms per call, round by round: the candidate's with its blocked time beyond
    the reference's floor, the reference's with its disturbed rounds capped."""
    floor = blocked_floor(ref)
    return ([statistics.fmean(candidate_call_ms(side, floor)) for side in cand],
            capped_reference_means([statistics.fmean(side.ms) for side in ref]))

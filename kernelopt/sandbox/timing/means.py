"""Each side's time per call, round by round: what the speedup and the stop rule are made of.

Every call's time is the host's (calls.py: the group's CPU time on a CPU, else the wall clock
around the call's window), taken the same way on both sides, so nothing is allowed for the
harness's work or charged for it: the loop inside the window is the same code on both sides and
in both times. Two corrections, each of which can only lower a speedup: where the CPU time
decides, a candidate's call that spent longer blocked than the reference's calls do (sleeping,
waiting on a lock or a pipe: the kernel's accounting, not the candidate's) takes that time too;
and a round the host disturbed (preempted during the trusted reference's calls) is capped.

Where the wall clock decides (a GPU), other work on the machine lengthens either side's windows
alike: CPU contention stretches the harness part of every window, and other processes' kernels
time-slice the device. Capping the reference's disturbed rounds alone then reads honest kernels
slow (exact copies read 0.23x-0.77x on an H200 shared with five other test lanes, 2026-11-28),
so there the candidate's disturbed rounds are capped too, but never below its median round: a
candidate is never read faster than half of its own rounds measured.
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


def capped_candidate_means(means: list[float]) -> list[float]:
    """Where the wall clock decides, the candidate's round means, each at most the larger of
    REFERENCE_ROUND_CAP times their lower quartile and their median: the same cap as the
    reference's for a round the machine disturbed, but no round below the median moves, so a
    candidate slow in most of its rounds is read as slow as its median round at the least."""
    if len(means) < 2:
        return list(means)
    ordered = sorted(means)
    ceiling = max(REFERENCE_ROUND_CAP * percentile(ordered, 0.25), statistics.median(ordered))
    return [min(mean, ceiling) for mean in means]


def cpu_time_decided(sides: list[SideRound]) -> bool:
    """Whether the group's CPU time decided these calls (calls.py: on a CPU), not the wall clock."""
    return all(len(side.cpu_ms) == len(side.ms) and side.cpu_ms == side.ms for side in sides)


def blocked_excess(cand: list[SideRound], ref: list[SideRound]) -> float:
    """How much longer the candidate's calls are blocked than the reference's (ms per call: the
    difference of the two sides' medians over all rounds, or 0). Both sides' windows hold the
    thin loop's own waits and the host's late reads of an answer on a busy machine, which hit
    single calls of either side; a call that sleeps or waits every time moves the median."""
    cand_blocked = [ms for side in cand for ms in side.blocked_ms]
    ref_blocked = [ms for side in ref for ms in side.blocked_ms]
    if not cand_blocked or not ref_blocked:
        return 0.0
    return max(0.0, statistics.median(cand_blocked) - statistics.median(ref_blocked))


def candidate_call_ms(side: SideRound, excess: float) -> list[float]:
    """The candidate's calls, each with the blocked time its calls show beyond the reference's
    (a call that sleeps, or waits for something, takes that long whatever its CPU time)."""
    return [ms + excess for ms in side.ms]


def side_means(cand: list[SideRound], ref: list[SideRound]) -> tuple[list[float], list[float]]:
    """Each side's mean ms per call, round by round: the candidate's with its blocked time beyond
    the reference's (and, where the wall clock decides, its disturbed rounds capped down to its
    median at most), the reference's with its disturbed rounds capped."""
    excess = blocked_excess(cand, ref)
    cand_means = [statistics.fmean(candidate_call_ms(side, excess)) for side in cand]
    if not cpu_time_decided(cand):
        cand_means = capped_candidate_means(cand_means)
    return cand_means, capped_reference_means([statistics.fmean(side.ms) for side in ref])

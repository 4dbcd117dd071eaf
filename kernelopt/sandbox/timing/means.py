"""Each side's time per call, round by round: what the speedup and the stop rule are made of.

Every call's time is the host's (calls.py: the group's CPU time on a CPU, else the wall clock
around the call's window), taken the same way on both sides, so nothing is allowed for the
harness's work or charged for it: the loop inside the window is the same code on both sides and
in both times. The one correction is to the trusted reference, and it can only lower a
speedup: a round the host disturbed (preempted during the reference's calls) is capped.
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


def side_means(cand: list[SideRound], ref: list[SideRound]) -> tuple[list[float], list[float]]:
    """Each side's mean ms per call, round by round (the reference's disturbed rounds capped)."""
    return ([statistics.fmean(side.ms) for side in cand],
            capped_reference_means([statistics.fmean(side.ms) for side in ref]))

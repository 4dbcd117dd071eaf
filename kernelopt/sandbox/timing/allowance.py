"""The overhead allowance and charge: how the host's clock around every call checks each
worker's own timer, as a named unit.

Per call, the host's clock sees the call plus the harness's work around it (the inputs handed
over, the output copied out and fingerprinted), the same work on both sides. The part of one
side's overhead beyond the other's, past the noise of the paired calls and the few per cent
by which two processes differ, is charged to the candidate (`charge`; never to the trusted
reference, whose disturbed rounds are capped instead: noise may only lower a speedup); a gross
gap is rejected by the rule `wall_clock_gap` (sandbox/rules/) on `Overheads.gross`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from kernelopt.sandbox.records import SideRound, per_call_overheads
from kernelopt.sandbox.timing.stats import percentile, t95


def excess(own: list[float], other: list[float], trim: float = 0.1) -> float:
    """How much `own` exceeds `other` beyond noise, per pair (paired samples: the two sides'
    harness overheads of one call on the same inputs).

    The mean of the paired differences with `trim` of them cut from each tail, less its 95 %
    half-width (from the winsorized spread), or 0. Trimming keeps a preempted call (a few ms
    once in a while on a busy host) from widening the interval until real gaps hide in it; a
    gap confined to the trimmed tail is at most that fraction of the calls."""
    diffs = sorted(a - b for a, b in zip(own, other))
    n = len(diffs)
    if n == 0:
        return 0.0
    if n < 3:
        return max(0.0, statistics.fmean(diffs))
    cut = int(trim * n)
    kept = diffs[cut:n - cut]
    winsorized = [kept[0]] * cut + kept + [kept[-1]] * cut
    spread = statistics.stdev(winsorized) / (1 - 2 * cut / n)
    half = t95(len(kept) - 1) * spread / math.sqrt(n)
    return max(0.0, statistics.fmean(kept) - half)


# Two workers running identical code differ in their per-call harness overhead by a few per
# cent (each process's own memory layout and wake-up path: up to 4 % measured on the 2-core
# VM). A gap that small is nobody's doing, so it is never charged.
PROCESS_OVERHEAD_TOLERANCE = 0.05


def charge(own: list[float], other: list[float]) -> float:
    """The per-call ms charged to the side with overheads `own`: its excess over `other`
    beyond noise (excess) less the between-process tolerance, or 0."""
    if not other:
        return 0.0
    return max(0.0, excess(own, other) - PROCESS_OVERHEAD_TOLERANCE * statistics.fmean(other))



@dataclass(frozen=True)
class Overheads:
    """Per call over a set of rounds: the candidate's overhead (host time beyond its timer), the
    reference's, and the most the candidate's may be before the gap is gross."""

    candidate_ms: float
    reference_ms: float
    allowed_ms: float

    @property
    def gross(self) -> bool:
        return self.candidate_ms > self.allowed_ms

    def detail(self) -> str:
        return (f"per-call time outside the timer: candidate {self.candidate_ms:.3f} ms, "
                f"reference {self.reference_ms:.3f} ms (allowed {self.allowed_ms:.3f} ms)")


def overheads(rounds: list[tuple[SideRound, SideRound]]) -> Overheads:
    """Small gaps are noise or small forgeries, which the speedup charges where they are more
    than noise (side_means); only a gap over three times the reference's overhead, plus 1 ms
    and half the candidate's call, is gross."""
    cand_ms = statistics.fmean(ms for c, _ in rounds for ms in c.timer_ms)
    slack_c = statistics.fmean(c.overhead_ms for c, _ in rounds)
    slack_r = statistics.fmean(r.overhead_ms for _, r in rounds)
    return Overheads(candidate_ms=slack_c, reference_ms=slack_r, allowed_ms=3 * slack_r + 1.0 + 0.5 * cand_ms)


# A round of the reference whose mean is more than this over the lower quartile of its rounds was
# disturbed (the host preempted the trusted reference during its calls): it is capped there.
REFERENCE_ROUND_CAP = 1.25


def capped_reference_means(means: list[float]) -> list[float]:
    """The reference's round means, each at most REFERENCE_ROUND_CAP times the lower quartile of
    them all. Time added to the reference raises the speedup, and on a busy host preemption
    inside the reference's calls adds it (an exact copy was measured at 1.43x that way), so a
    disturbed round counts only as much as a quiet one. Capping only ever lowers the reference,
    so it can only lower a speedup; the candidate is frozen during the reference's turns and
    decides nothing about it, and its own disturbed rounds count against it in full."""
    if len(means) < 2:
        return list(means)
    ceiling = REFERENCE_ROUND_CAP * percentile(sorted(means), 0.25)
    return [min(mean, ceiling) for mean in means]


def side_means(cand: list[SideRound], ref: list[SideRound], device: str) -> tuple[list[float], list[float], str]:
    """Each side's mean ms per call, round by round, and how they were measured.

    Each worker's timer measures its calls (host perf_counter on a CPU; CUDA events after a
    device-wide synchronisation on a GPU), and the host's clock around every call checks the
    candidate's: per call, the time the host saw beyond the timer is the same harness work on
    both sides, so the part of the candidate's overhead that exceeds the reference's by more
    than the noise of the paired calls (work hidden from the timer, forged timings) is added to
    its time, less the few per cent by which two processes running the same code differ
    (charge). The reference runs trusted code, so its timer is never in doubt and nothing is
    added to it: noise may only ever lower a speedup. Its disturbed rounds are capped
    (capped_reference_means) for the same reason."""
    cand_over, ref_over = per_call_overheads(cand), per_call_overheads(ref)
    cand_charge = charge(cand_over, ref_over)
    clock = ("cuda events + device-wide synchronize, L2 flushed before each call" if device.startswith("cuda")
             else "host perf_counter per call")
    return ([statistics.fmean(c.timer_ms) + cand_charge for c in cand],
            capped_reference_means([statistics.fmean(r.timer_ms) for r in ref]),
            clock + "; the host clock around every call charges the candidate's overhead beyond the reference's; "
                    "disturbed reference rounds capped")

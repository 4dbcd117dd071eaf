"""How the host's clock decides each candidate call's time, as a named unit.

The worker's own timer runs where the program can reach it (its frames, its module globals,
ctypes), so it is a precise reading only while the host's clock agrees with it. The host's
clock sees every call twice:

- **between the call's marks** (`SideRound.marked_ms`): the worker tells the host as the call
  starts (before any of the program's code runs) and as it returns, each mark with the
  monotonic clock's reading as it left, and the host keeps each reading only where its own
  clock allows it (`conversation.checked_marks`). That is the call alone, plus a few
  microseconds of messaging on both sides. Per call, the marked time beyond the worker's timer
  is the *gap*; the reference's gaps, call to call, measure how closely the host's clock can
  check a timer on this machine in this evaluation (`gap_floor`). A candidate whose gap exceeds
  the reference's by more than that floor is charged the whole difference: its time is then
  the host's (`gaps`, rule `timer_disagrees_with_host`). How long each end mark took to reach
  the host after the end it reports (`SideRound.arrival_ms`) is reported beside it, not
  charged: it is the host's wake-up on a busy machine;
- **around the whole call** (`SideRound.host_ms`): the inputs handed over, the call, the output
  copied out and fingerprinted. Work the program hides in the harness's steps after its call (a
  finalizer of its output) shows only here, where the harness's own work is far noisier; the
  part of the candidate's overhead beyond the reference's, past that noise and the few per
  cent by which two processes' harness work differs, is charged (`charge`); a gross gap is
  rejected by the rule `wall_clock_gap` (sandbox/rules/) on `Overheads.gross`.

Where the first says the timer is wrong, the candidate's time is the host's, call by call
(`host_decides`), or its timer's with the second charge where that is more. Nothing is ever added to the trusted
reference (its disturbed rounds are capped instead): noise may only lower a speedup.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from kernelopt.sandbox.records import SideRound, per_call_gaps, per_call_overheads
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


def robust_spread(values: list[float]) -> float:
    """A standard deviation that outliers in up to half the values do not move (a mark the
    host's process read late on a busy machine, a call preempted in the harness's steps around
    it): the median absolute deviation times 1.4826 (exact for a normal distribution)."""
    if len(values) < 2:
        return 0.0
    centre = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - centre) for v in values)


def gap_floor(reference: list[float]) -> float:
    """The noise floor of the host's check in this evaluation (ms): the 95 % half-width of the
    median of as many paired differences as the reference has calls, from the reference's own
    call-to-call variation (`robust_spread`), and never more than that variation itself (one
    call's noise). The reference runs trusted code, so a candidate can neither see nor widen it:
    one that scatters its own readings to hide a forged timer in the noise gains nothing."""
    n = len(reference)
    spread = robust_spread(reference)
    if n < 3:
        return spread
    # A paired difference of two such readings has sqrt(2) times one's spread; a median is about
    # 1.25 times as variable as a mean of a normal sample.
    return min(spread, t95(n - 1) * 1.25 * spread * math.sqrt(2.0 / n))


@dataclass(frozen=True)
class Difference:
    """How much more one reading was per call on the candidate's side than on the reference's
    (the median of the paired differences), and the floor below which that is noise."""

    ms: float
    floor_ms: float

    @property
    def beyond_floor(self) -> bool:
        return self.ms > self.floor_ms

    @property
    def charge_ms(self) -> float:
        """Beyond the floor, the whole difference: the host's time, not a discount on it."""
        return self.ms if self.beyond_floor else 0.0


def difference(candidate: list[float], reference: list[float]) -> Difference:
    pairs = min(len(candidate), len(reference))
    if pairs == 0:
        return Difference(ms=0.0, floor_ms=0.0)
    return Difference(ms=statistics.median(c - r for c, r in zip(candidate, reference)),
                      floor_ms=gap_floor(reference[:pairs]))


FLAG_FLOORS = 2.0  # a gap this many noise floors beyond the reference's is flagged, not only charged
# ... and only when it hides this share of the call as the host saw it: on a loaded host the
# reference's calls are preempted more in some turns than the candidate's, which moves the
# difference of the gaps by more than two floors (an honest ReLU copy was flagged in CI); the
# charge corrects that noise either way, and a flag must mean a forgery (they hide half a call).
FLAG_SHARE = 0.25


@dataclass(frozen=True)
class Gaps:
    """The host's check of the candidate's timer between each call's marks: `timer`, the call's
    time between its marks beyond the worker's timer (a forged start, a timer that
    under-reports), whose difference from the reference's beyond its floor is charged in full;
    and, reported beside it, `arrival`: from the call's end as the worker read the clock to the
    end mark's arrival on the host. That delay is the host's wake-up on a busy machine (up to
    milliseconds, and not alike from one turn to the next), so it is not charged: it bounds what
    a replaced clock could move the end reading by (docs/referee.md, residual risks)."""

    timer: Difference
    arrival: Difference
    calls: int
    call_ms: float = 0.0  # the candidate's median call between its marks (the host's clocks)

    @property
    def beyond_floor(self) -> bool:
        return self.calls > 0 and self.timer.beyond_floor

    @property
    def flagged(self) -> bool:
        """Beyond FLAG_FLOORS floors: the time is the host's from one floor on, but a verdict is
        flagged only where noise is out of the question (a 95 % floor alone would flag one
        honest candidate in twenty, and a flag may cost it its reward)."""
        return self.calls > 0 and self.timer.ms > max(FLAG_FLOORS * self.timer.floor_ms, FLAG_SHARE * self.call_ms)

    @property
    def charge_ms(self) -> float:
        return self.timer.charge_ms if self.calls else 0.0

    @property
    def difference_ms(self) -> float:
        return self.timer.ms

    @property
    def floor_ms(self) -> float:
        return self.timer.floor_ms

    def detail(self) -> str:
        return (f"per call, between the call's marks the host's clock saw {self.timer.ms * 1e3:.1f} us more beyond "
                f"the candidate's timer than beyond the reference's (noise floor {self.timer.floor_ms * 1e3:.1f} us, "
                f"from the reference's own {self.calls} calls); its end marks arrived {self.arrival.ms * 1e3:.1f} us "
                f"later after the end they read (not charged)")


def gaps(cand_gaps: list[float], ref_gaps: list[float], cand_arrivals: Sequence[float] = (),
         ref_arrivals: Sequence[float] = (), cand_calls: Sequence[float] = ()) -> Gaps:
    """The candidate's gaps (marked ms beyond its timer, per call) and end-mark arrivals
    against the reference's on the same inputs, in pairs; nothing measured is nothing charged.
    `cand_calls`: the candidate's calls between their marks (for the share a flag needs)."""
    return Gaps(timer=difference(cand_gaps, ref_gaps), arrival=difference(list(cand_arrivals), list(ref_arrivals)),
                calls=min(len(cand_gaps), len(ref_gaps)),
                call_ms=statistics.median(cand_calls) if cand_calls else 0.0)


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


def host_decides(cand: list[SideRound], ref: list[SideRound], timed_means: list[float]) -> list[float]:
    """The candidate's mean ms per call, round by round: its timer's (`timed_means`, any charge
    around the call included) while the host's clocks between the calls' marks agree with it;
    once the gap is beyond the floor (`gaps`), the host's time: in each round, its timer's mean
    plus how far the round's median gap exceeds the reference's median gap (the harness's steps
    both sides share), wherever that is more. Round by round, not one constant: a forged timer
    that reports a share of each call would otherwise keep that share of every call a busy host
    stretched; a median within the round, so that one call the collector or a late read
    lengthened does not charge its round."""
    cand_gaps, ref_gaps = per_call_gaps(cand), per_call_gaps(ref)
    if not gaps(cand_gaps, ref_gaps).beyond_floor:
        return timed_means
    shared = statistics.median(ref_gaps)
    hosts = []
    for side, timed in zip(cand, timed_means):
        round_gaps = per_call_gaps([side])
        if not round_gaps:
            hosts.append(timed)
            continue
        hosts.append(max(timed, statistics.fmean(side.timer_ms) + statistics.median(round_gaps) - shared))
    return hosts


def side_means(cand: list[SideRound], ref: list[SideRound], device: str) -> tuple[list[float], list[float], str]:
    """Each side's mean ms per call, round by round, and how they were measured.

    Each worker's timer measures its calls (host perf_counter on a CPU; CUDA events after a
    device-wide synchronisation on a GPU), and the host's clock checks the candidate's twice
    (the module's docstring): around every call, where overhead beyond the reference's, past
    the noise and the few per cent by which two processes' harness work differs, is charged
    (charge); and between each call's marks, where a gap beyond the reference's noise floor
    makes the host's time the candidate's (host_decides). The
    reference runs trusted code, so its timer is never in doubt and nothing is added to it:
    noise may only ever lower a speedup. Its disturbed rounds are capped
    (capped_reference_means) for the same reason."""
    cand_over, ref_over = per_call_overheads(cand), per_call_overheads(ref)
    cand_charge = charge(cand_over, ref_over)
    clock = ("cuda events + device-wide synchronize, L2 flushed before each call" if device.startswith("cuda")
             else "host perf_counter per call")
    return (host_decides(cand, ref, [statistics.fmean(c.timer_ms) + cand_charge for c in cand]),
            capped_reference_means([statistics.fmean(r.timer_ms) for r in ref]),
            clock + "; checked by the host's clock between each call's marks (a gap beyond the reference's noise "
                    "floor is charged in full) and around every call; disturbed reference rounds capped")

"""The host's clock decides (timing/allowance.py `gaps`, conversation.checked_marks): the noise
floor of the host's check is calibrated from the reference's own calls, a candidate whose timer
reports less than the host saw between its call's marks, past that floor, is charged the host's
time, and an honest one within it is not. Synthetic records only, no workers; the numbers are
drawn from seeded generators, so nothing here depends on the machine's load."""

from __future__ import annotations

import random
import statistics

import pytest

from kernelopt.sandbox import rules
from kernelopt.sandbox.conversation import checked_marks
from kernelopt.sandbox.records import SideRound
from kernelopt.sandbox.timing import gap_floor, gaps, robust_spread, side_means


def _gaps(rng: random.Random, n: int, centre: float, spread: float) -> list[float]:
    return [rng.gauss(centre, spread) for _ in range(n)]


def test_a_quiet_reference_gives_a_small_floor_and_a_noisy_one_a_larger_floor_never_beyond_its_noise():
    rng = random.Random(1)
    quiet = _gaps(rng, 100, 0.150, 0.005)  # ms: 150 us of messaging, 5 us of call-to-call noise
    noisy = _gaps(rng, 100, 0.150, 0.200)
    assert gap_floor(quiet) < 0.005  # a few microseconds: the half-width over 100 calls
    assert gap_floor(quiet) < gap_floor(noisy) <= robust_spread(noisy)
    # More calls, a lower floor; with few calls the floor is the noise of one call, never more.
    assert gap_floor(noisy[:100]) < gap_floor(noisy[:20])
    assert gap_floor(noisy[:4]) == pytest.approx(robust_spread(noisy[:4]))
    assert gap_floor([0.15] * 50) == 0.0


def test_a_gap_beyond_the_floor_is_charged_in_full_and_flagged():
    rng = random.Random(2)
    ref = _gaps(rng, 120, 0.150, 0.010)
    # The candidate's timer reports 0.3 ms less than the host saw on every call.
    forged = [r + 0.3 + rng.gauss(0.0, 0.010) for r in ref]
    found = gaps(forged, ref)
    assert found.beyond_floor and found.floor_ms < 0.01
    assert found.charge_ms == pytest.approx(0.3, abs=0.01)  # the whole gap, not the part past the floor
    verdict = rules.timer_disagrees_with_host(found)
    assert (verdict.rule, verdict.status, verdict.flags) == ("timer_disagrees_with_host", rules.FLAGGED,
                                                             ("timing_inconsistent",))
    assert "its time is the host's" in verdict.message
    # Between one floor and two the time is the host's, but the verdict is not flagged.
    floor = found.floor_ms
    slight = gaps([r + 1.5 * floor for r in ref], ref)
    assert slight.beyond_floor and not slight.flagged and rules.timer_disagrees_with_host(slight) is None
    # A flag also needs a quarter of the call hidden: a loaded host's preemptions of the reference
    # move the gaps' difference past two floors, but not by a share of the call (both charged).
    calls = [0.6] * len(ref)  # the candidate's calls as the host saw them between their marks
    assert gaps(forged, ref, cand_calls=calls).flagged  # half the call hidden
    preempted = gaps([r + 0.1 for r in ref], ref, cand_calls=calls)
    assert preempted.timer.ms > 2 * preempted.floor_ms and preempted.charge_ms == pytest.approx(0.1, abs=0.01)
    assert not preempted.flagged and rules.timer_disagrees_with_host(preempted) is None


def test_an_honest_gap_within_the_floor_is_not_charged():
    rng = random.Random(3)
    charged = 0
    for _ in range(200):
        ref = _gaps(rng, 60, 0.150, 0.020)
        # Another process running the same harness: the same noise, and a systematic offset of
        # half a microsecond.
        found = gaps(_gaps(rng, 60, 0.1505, 0.020), ref)
        assert found.charge_ms <= 0.03  # at most about the floor, on the rare draw past it
        charged += found.beyond_floor
    assert charged < 20  # a 95 % floor: about one evaluation in twenty at most
    assert rules.timer_disagrees_with_host(gaps(ref, ref)) is None
    assert gaps([], []).charge_ms == 0.0 and not gaps([], []).beyond_floor  # nothing measured, nothing charged


def test_the_candidate_cannot_widen_the_floor_by_scattering_its_own_gaps():
    rng = random.Random(4)
    ref = _gaps(rng, 100, 0.150, 0.010)
    scattered = [r + 0.2 + rng.uniform(-1.0, 1.0) for r in ref]  # its forged shift hidden in 1 ms of noise
    found = gaps(scattered, ref)
    assert found.floor_ms == gap_floor(ref)  # from the reference alone
    assert found.beyond_floor and found.charge_ms > 0.05


def test_late_marks_in_a_quarter_of_the_calls_do_not_charge_an_honest_candidate():
    # A busy host reads some marks late: a call's bracket then looks longer by up to milliseconds,
    # on either side. The median of the paired differences does not follow such a tail.
    rng = random.Random(5)
    for _ in range(30):
        ref = [g + (rng.uniform(0.5, 5.0) if rng.random() < 0.25 else 0.0) for g in _gaps(rng, 40, 0.15, 0.01)]
        cand = [g + (rng.uniform(0.5, 5.0) if rng.random() < 0.25 else 0.0) for g in _gaps(rng, 40, 0.15, 0.01)]
        assert gaps(cand, ref).charge_ms < 0.05


def test_the_host_keeps_a_worker_reading_only_where_its_own_clock_allows_it():
    sent, arrived_start, arrived_end = 10.0, 10.002, 10.010
    # Readings inside their windows are kept: the call ran from 10.001 to 10.008.
    assert checked_marks(10_001_000_000, 10_008_000_000, sent, arrived_start, arrived_end) == \
        pytest.approx((10.001, 10.008, 10.010))
    # A start reading after its mark arrived (a clock replaced to start late) falls back to the
    # hand-over of the inputs, the earliest the call can have started.
    assert checked_marks(10_003_000_000, 10_008_000_000, sent, arrived_start, arrived_end)[0] == sent
    # An end reading before the start, or not a number, falls back to the end mark's arrival.
    assert checked_marks(10_001_000_000, 9_000_000_000, sent, arrived_start, arrived_end)[1] == arrived_end
    assert checked_marks("soon", None, sent, arrived_start, arrived_end) == (sent, arrived_end, arrived_end)


def _side(timer_ms: float, marked_gap_ms: float, rng: random.Random, calls: int = 10) -> SideRound:
    timer = [timer_ms] * calls
    marked = [timer_ms + marked_gap_ms + rng.gauss(0.0, 0.002) for _ in range(calls)]
    return SideRound(timer_ms=timer, host_ms=[m + 5.0 for m in marked], marked_ms=marked)


def test_the_charge_makes_the_candidates_time_the_hosts_and_never_touches_the_reference():
    rng = random.Random(6)
    ref = [_side(0.6, 0.15, rng) for _ in range(6)]
    # The candidate's timer says 0.2 ms where the host's clock between the marks saw 0.6 ms.
    forged = [_side(0.2, 0.55, rng) for _ in range(6)]
    cand_means, ref_means, method = side_means(forged, ref, "cpu")
    assert statistics.fmean(cand_means) == pytest.approx(0.6, abs=0.01)
    assert statistics.fmean(ref_means) == pytest.approx(0.6)
    assert "between each call's marks" in method
    # Swapped: a reference whose gap is the larger is never charged, and the candidate is not either.
    cand_means, ref_means, _ = side_means(ref, forged, "cpu")
    assert statistics.fmean(ref_means) == pytest.approx(0.2) and statistics.fmean(cand_means) == pytest.approx(0.6)


def test_once_the_timer_is_wrong_every_call_is_timed_by_the_host():
    # A timer that reports 40 % of each call keeps 60 % of every call a busy host stretched if
    # one constant were charged; the host's time is taken call by call instead.
    rng = random.Random(7)
    ref = [_side(0.6, 0.15, rng) for _ in range(8)]
    stretched = [0.6 * (5.0 if k % 4 == 0 else 1.0) for k in range(8)]  # every fourth round preempted
    forged = []
    for true_ms in stretched:
        marked = [true_ms + 0.15 + rng.gauss(0.0, 0.002) for _ in range(10)]
        forged.append(SideRound(timer_ms=[0.4 * true_ms] * 10, host_ms=[m + 5.0 for m in marked], marked_ms=marked))
    cand_means, _, _ = side_means(forged, ref, "cpu")
    assert cand_means == pytest.approx(stretched, abs=0.01)


def test_one_lengthened_call_does_not_charge_its_round():
    # Once the host's time is taken, a call the collector or a late read lengthened by 5 ms in
    # an otherwise agreeing round costs nothing: the round's median gap decides.
    rng = random.Random(8)
    ref = [_side(0.6, 0.15, rng) for _ in range(6)]
    forged = [_side(0.2, 0.55, rng) for _ in range(6)]
    forged[2].marked_ms[3] += 5.0
    cand_means, _, _ = side_means(forged, ref, "cpu")
    assert max(cand_means) == pytest.approx(0.6, abs=0.01)

"""Host-side details of timing and of the sandbox census: the core both workers' timed calls
share, when timing stops, and what a rejected thread is called."""

from __future__ import annotations

import math
import os
import random
import statistics

import pytest
from conftest import REPO

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, evaluate
from kernelopt.sandbox.referee import timing_cpu
from kernelopt.sandbox.timing import median_precision, speedup_precision, summarize
from kernelopt.sandbox.worker.main import _pinned_to


@pytest.mark.parametrize("pin, device, pinned", [
    ("auto", "cpu", False), ("auto", "cuda:0", True), ("on", "cpu", True), ("off", "cuda:0", False)])
def test_timed_calls_are_pinned_for_cuda_by_default(pin, device, pinned):
    core = timing_cpu(EvalOptions(pin_timing=pin), device)
    assert (core is not None) == pinned
    if pinned:
        assert core == max(os.sched_getaffinity(0))


def test_pinning_holds_for_the_block_and_is_undone_after():
    before = os.sched_getaffinity(0)
    core = min(before)
    with _pinned_to(core):
        assert os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before
    with _pinned_to(None):
        assert os.sched_getaffinity(0) == before


def test_a_core_the_worker_may_not_use_is_ignored():
    before = os.sched_getaffinity(0)
    with _pinned_to(10_000):
        assert os.sched_getaffinity(0) == before


def test_an_evaluation_with_pinned_timing_judges_as_usual(example, fast_options):
    problem = load_problem(example("1_ReLU"))
    source = (REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py").read_text()
    result = evaluate(problem, source, fast_options(pin_timing="on"))
    assert result.status == "correct", result.message
    assert result.timing.candidate.samples >= 5


def test_a_native_thread_is_rejected_by_the_host_census_and_named(example, fast_options):
    source = (REPO / "tests" / "adversarial" / "hacks" / "thread_native_pthread.py").read_text()
    result = evaluate(load_problem(example("1_ReLU")), source, fast_options())
    assert result.status == "rejected"
    assert "native_threads" in result.flags
    assert "offstage" in result.message


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    # Skewed call times (lognormal, true median 1.0 ms): the interval needs no shape.
    rng = random.Random(7)
    repeats, covered = 2000, 0
    for _ in range(repeats):
        samples = [rng.lognormvariate(0.0, 0.4) for _ in range(60)]
        half = median_precision(samples) * statistics.median(samples)
        covered += abs(statistics.median(samples) - 1.0) <= half
    assert 0.93 <= covered / repeats <= 0.99


def test_the_median_interval_narrows_with_more_samples_and_is_zero_without_spread():
    rng = random.Random(11)
    wide = [rng.lognormvariate(0.0, 0.3) for _ in range(1000)]
    assert median_precision(wide[:400]) < median_precision(wide[:100]) < median_precision(wide[:25])
    assert median_precision([0.8] * 12) == 0.0


def test_the_speedup_precision_adds_both_sides_in_quadrature():
    rng = random.Random(3)
    cand = [rng.gauss(1.0, 0.05) for _ in range(50)]
    ref = [rng.gauss(2.0, 0.3) for _ in range(50)]
    assert speedup_precision(summarize(cand), summarize(ref)) == pytest.approx(
        math.hypot(median_precision(cand), median_precision(ref)))
    assert speedup_precision(summarize(cand), summarize(cand)) == pytest.approx(math.sqrt(2) * median_precision(cand))


def test_timing_stops_once_the_speedup_is_precise_enough_and_reports_how_precise(example, fast_options):
    problem = load_problem(example("1_ReLU"))
    source = (REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py").read_text()
    loose = evaluate(problem, source, fast_options(timing_budget=4.0, target_rel_spread=1e-9, target_precision=10.0))
    strict = evaluate(problem, source, fast_options(timing_budget=4.0, target_rel_spread=1e-9, target_precision=1e-9))
    assert loose.status == strict.status == "correct", (loose.message, strict.message)
    # Loose: the first check after the minimum (three rounds, five calls) stops it.
    assert loose.timing.rounds == 3
    assert loose.timing.speedup_precision <= 10.0
    assert loose.durations["timing"] < 2.0
    # Strict: nothing is precise enough, so the budget ends it.
    assert strict.timing.rounds > 3
    assert strict.durations["timing"] >= 3.0
    assert 0 < strict.timing.speedup_precision == pytest.approx(
        math.hypot(strict.timing.candidate.median_precision, strict.timing.reference.median_precision))

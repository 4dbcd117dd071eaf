"""Host-side details of timing and of the sandbox census: the core both workers' timed calls
share, and what a rejected thread is called."""

from __future__ import annotations

import os

import pytest
from conftest import REPO

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, evaluate
from kernelopt.sandbox.referee import timing_cpu
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

"""Budget: reserved calls and evaluations, tokens, cost, wall time, target speedup, explicit stops."""

from __future__ import annotations

import threading
import time

import pytest

from kernelopt.agent.budget import Budget, BudgetLimits


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def unlimited(**limits) -> BudgetLimits:
    settings = dict(llm_calls=None, tokens=None, cost=None, evaluations=None, wall_seconds=None,
                    target_speedup=None)
    settings.update(limits)
    return BudgetLimits(**settings)


def test_default_limits():
    limits = BudgetLimits()
    assert limits.llm_calls == 8
    assert (limits.tokens, limits.cost, limits.evaluations, limits.wall_seconds, limits.target_speedup) == (
        None, None, None, None, None)


def test_no_limits_never_stops():
    budget = Budget(unlimited(), clock=FakeClock())
    for _ in range(100):
        assert budget.reserve_attempt()
    assert budget.stop_reason() is None
    assert budget.calls == 100 and budget.evaluations == 100


def test_reserve_attempt_stops_at_the_call_limit():
    budget = Budget(unlimited(llm_calls=3), clock=FakeClock())
    assert [budget.reserve_attempt() for _ in range(5)] == [True, True, True, False, False]
    assert budget.calls == 3
    assert budget.evaluations == 3
    reason = budget.stop_reason()
    assert reason is not None and "LLM call budget" in reason and "3" in reason
    assert not budget.reserve_call()


def test_reserve_call_counts_calls_but_not_evaluations():
    budget = Budget(unlimited(llm_calls=3), clock=FakeClock())
    assert budget.reserve_call()
    assert budget.reserve_attempt()
    assert (budget.calls, budget.evaluations) == (2, 1)
    assert budget.reserve_call()
    assert not budget.reserve_attempt()
    assert not budget.reserve_call()
    assert budget.calls == 3


def test_evaluation_limit_is_independent_of_the_call_limit():
    budget = Budget(unlimited(llm_calls=10, evaluations=2), clock=FakeClock())
    assert budget.reserve_attempt()
    assert budget.reserve_attempt()
    assert budget.stop_reason() is not None and "evaluation budget" in budget.stop_reason()
    assert not budget.reserve_attempt()
    assert budget.calls == 2  # the refused attempt reserved nothing


def test_release_evaluation_gives_the_slot_back():
    budget = Budget(unlimited(llm_calls=10, evaluations=2), clock=FakeClock())
    assert budget.reserve_attempt() and budget.reserve_attempt()
    assert not budget.reserve_attempt()
    budget.release_evaluation()  # e.g. the answer held no code
    assert budget.evaluations == 1
    assert budget.stop_reason() is None
    assert budget.reserve_attempt()
    assert (budget.calls, budget.evaluations) == (3, 2)
    assert not budget.reserve_attempt()


def test_token_limit_is_checked_after_usage():
    budget = Budget(unlimited(tokens=1000), clock=FakeClock())
    assert budget.reserve_attempt()
    budget.add_usage(600, None)
    assert budget.stop_reason() is None
    assert budget.reserve_attempt()  # in flight calls may go past the limit
    budget.add_usage(500, None)
    assert budget.tokens == 1100
    reason = budget.stop_reason()
    assert reason is not None and "token budget" in reason and "1100" in reason and "1000" in reason
    assert not budget.reserve_attempt()
    assert not budget.reserve_call()


def test_cost_limit_is_checked_after_usage():
    budget = Budget(unlimited(cost=0.01), clock=FakeClock())
    budget.add_usage(100, 0.004)
    budget.add_usage(100, None)  # a call without a price costs nothing
    assert budget.cost == pytest.approx(0.004)
    assert budget.reserve_attempt()
    budget.add_usage(100, 0.007)
    assert budget.cost == pytest.approx(0.011)
    reason = budget.stop_reason()
    assert reason is not None and "cost budget" in reason
    assert not budget.reserve_attempt()


def test_wall_time_uses_the_injected_clock():
    clock = FakeClock(50.0)
    budget = Budget(unlimited(wall_seconds=60), clock=clock)
    assert budget.elapsed() == 0
    clock.advance(59.5)
    assert budget.elapsed() == pytest.approx(59.5)
    assert budget.reserve_attempt()
    clock.advance(0.5)
    reason = budget.stop_reason()
    assert reason is not None and "wall-time" in reason and "60" in reason
    assert not budget.reserve_attempt()
    assert budget.calls == 1


def test_target_speedup_stops_new_work():
    budget = Budget(unlimited(target_speedup=2.0), clock=FakeClock())
    budget.record_speedup(1.5)
    assert budget.stop_reason() is None
    assert budget.reserve_attempt()
    budget.record_speedup(2.4)
    budget.record_speedup(1.1)  # a worse result does not lower the best
    assert budget.best_speedup == 2.4
    reason = budget.stop_reason()
    assert reason is not None and "target speedup" in reason and "2.4" in reason
    assert not budget.reserve_attempt()


def test_record_speedup_without_a_target_only_tracks_the_best():
    budget = Budget(unlimited(), clock=FakeClock())
    assert budget.best_speedup is None
    budget.record_speedup(0.8)
    budget.record_speedup(3.0)
    budget.record_speedup(2.0)
    assert budget.best_speedup == 3.0
    assert budget.stop_reason() is None


def test_stop_sticks_and_keeps_its_first_reason():
    budget = Budget(unlimited(llm_calls=100), clock=FakeClock())
    assert budget.reserve_attempt()
    budget.stop("stopped: the endpoint rejected the API key")
    assert budget.stop_reason() == "stopped: the endpoint rejected the API key"
    assert not budget.reserve_attempt()
    assert not budget.reserve_call()
    budget.stop("interrupted")
    assert budget.stop_reason() == "stopped: the endpoint rejected the API key"
    budget.release_evaluation()
    budget.add_usage(0, 0.0)
    assert budget.stop_reason() == "stopped: the endpoint rejected the API key"
    assert budget.calls == 1


def test_stop_reason_takes_precedence_over_limits():
    budget = Budget(unlimited(llm_calls=1), clock=FakeClock())
    assert budget.reserve_attempt()
    assert "LLM call budget" in budget.stop_reason()
    budget.stop("interrupted by the user")
    assert budget.stop_reason() == "interrupted by the user"


def yielding_clock() -> float:
    """A clock that gives up the GIL on every reading, so that threads interleave inside the
    budget's checks (where a missing lock would let two threads take the last slot)."""
    time.sleep(0)
    return 0.0


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_reservations_never_exceed_the_limit(round_):
    limit = 37
    budget = Budget(unlimited(llm_calls=limit, wall_seconds=1e9), clock=yielding_clock)
    granted = [0] * 16
    barrier = threading.Barrier(16)

    def worker(slot: int) -> None:
        barrier.wait()
        for _ in range(20):
            if budget.reserve_attempt():
                granted[slot] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sum(granted) == limit
    assert budget.calls == limit
    assert budget.evaluations == limit
    assert "LLM call budget" in budget.stop_reason()

"""Reward functions against their formulas (docs/rewards.md), specs, shaping and returns."""

from __future__ import annotations

import math

import pytest

from kernelopt.rewards import (Outcome, RewardError, discounted_returns, make_reward, max_reward_returns,
                               reward_names)
from kernelopt.sandbox.results import EvalResult

FAILURES = ["format_error", "compile_error", "runtime_error", "timeout", "incorrect", "rejected"]


def correct(speedup: float) -> Outcome:
    return Outcome("correct", speedup)


def test_binary_is_one_for_correct_and_zero_for_every_failure():
    binary = make_reward("binary")
    assert binary(correct(0.3)) == binary(correct(7.0)) == 1.0
    assert [binary(Outcome(s)) for s in FAILURES] == [0.0] * len(FAILURES)


def test_speedup_with_cap_and_bonus():
    assert make_reward("speedup")(correct(2.5)) == 2.5
    capped = make_reward("speedup:cap=4,bonus=0.3")
    assert capped(correct(2.5)) == pytest.approx(2.8)
    assert capped(correct(40.0)) == pytest.approx(4.3)
    assert capped(Outcome("incorrect")) == 0.0


def test_log_speedup_is_clipped_and_failures_sit_at_the_floor():
    log = make_reward("log_speedup")
    assert log(correct(2.0)) == pytest.approx(math.log(2.0))
    assert log(correct(0.5)) == pytest.approx(-math.log(2.0))
    assert log(correct(1e6)) == 3.0 and log(correct(1e-6)) == -3.0
    assert {log(Outcome(s)) for s in FAILURES} == {-3.0}
    # the floor follows the clip chosen; a shaping value given explicitly wins
    tight = make_reward("log_speedup:clip=1,format=-5")
    assert tight(Outcome("compile_error")) == -1.0 and tight(Outcome("format_error")) == -5.0


@pytest.mark.parametrize("speedup, rounded", [(1.04, 1.0), (1.05, 1.05), (1.07, 1.05), (0.97, 1.0),
                                              (0.93, 0.95), (0.95, 0.95), (2.0, 2.0), (1.0, 1.0)])
def test_cuda_l1_rounds_speedup_toward_one(speedup, rounded):
    assert make_reward("cuda_l1")(correct(speedup)) == pytest.approx(rounded)


def test_cuda_l1_group_is_normalized_and_clipped():
    reward = make_reward("cuda_l1:k=1")
    outcomes = [correct(3.0), Outcome("incorrect"), correct(1.0), Outcome("compile_error")]
    raw = [3.0, 0.0, 1.0, 0.0]
    mean = sum(raw) / 4
    deviation = math.sqrt(sum((r - mean) ** 2 for r in raw) / 4)
    expected = [max(-1.0, min(1.0, (r - mean) / deviation)) for r in raw]
    assert reward.group(outcomes) == pytest.approx(expected)
    assert max(reward.group(outcomes)) == 1.0  # (3 - 1) / 1.22 = 1.63, clipped
    assert reward.group([correct(2.0), correct(2.0)]) == [0.0, 0.0]  # no signal in a tie
    # rewards without a group step are the same in a group as alone
    speedup = make_reward("speedup")
    assert speedup.group(outcomes) == [speedup(o) for o in outcomes]


def test_shaping_orders_failures_and_a_caught_hack_is_never_worth_more():
    shaped = make_reward("speedup:format=-1,compile=-0.5,runtime=-0.3,incorrect=-0.1")
    values = [shaped(Outcome(s)) for s in ("format_error", "compile_error", "runtime_error", "incorrect")]
    assert values == [-1.0, -0.5, -0.3, -0.1]
    assert shaped(Outcome("timeout")) == -0.3
    assert shaped(Outcome("rejected")) == -1.0  # defaults to the worst failure
    assert make_reward("speedup:rejected=-9")(Outcome("rejected")) == -9.0


def test_spec_is_canonical_and_reproduces_the_function():
    reward = make_reward(" cuda_l1:k=2 ")
    assert reward.spec.startswith("cuda_l1:") and "k=2" in reward.spec and "step=0.05" in reward.spec
    again = make_reward(reward.spec)
    assert again.params == reward.params
    assert make_reward(make_reward("speedup").spec).params["cap"] == math.inf
    assert set(reward_names()) == {"binary", "speedup", "log_speedup", "cuda_l1", "sol", "milestone"}


@pytest.mark.parametrize("spec, words", [("nope", "unknown reward 'nope'"), ("speedup:k=3", "bad parameter 'k=3'"),
                                         ("speedup:cap", "bad parameter 'cap'"),
                                         ("cuda_l1:k=big", "must be a number")])
def test_bad_specs_say_what_is_wrong(spec, words):
    with pytest.raises(RewardError, match=words):
        make_reward(spec)


def test_outcome_from_a_real_verdict_and_from_its_json():
    result = EvalResult(status="correct", correct=True, speedup=1.5, flags=["reduced_precision"])
    for source in (result, result.model_dump(), {"status": "correct", "speedup": 1.5, "flags": ["reduced_precision"]}):
        outcome = Outcome.from_result(source)
        assert outcome == Outcome("correct", 1.5, ("reduced_precision",))
    assert Outcome.from_result({"status": "timeout"}).status == "timeout"
    with pytest.raises(RewardError, match="unknown verdict status"):
        Outcome.from_result({"status": "great"})
    with pytest.raises(RewardError, match="positive speedup"):
        make_reward("speedup")(Outcome("correct", None))


def test_discounted_returns():
    assert discounted_returns([1.0, 0.0, 2.0], 0.5) == pytest.approx([1.0 + 0.5 * (0.0 + 0.5 * 2.0), 1.0, 2.0])
    assert discounted_returns([1.0, 2.0], 1.0) == [3.0, 2.0]
    assert discounted_returns([], 0.9) == []


def test_max_reward_returns():
    assert max_reward_returns([0.0, 3.0, 1.0]) == [3.0, 3.0, 1.0]
    assert max_reward_returns([0.0, 3.0, 1.0], gamma=0.5) == [1.5, 3.0, 1.0]
    assert max_reward_returns([2.0, 1.0]) == [2.0, 1.0]
    assert max_reward_returns([]) == []


# -- precision: a reward whose interval is too wide is discounted or withheld ----------------------

def test_a_wide_interval_discounts_the_speedup_or_withholds_the_reward():
    tight, wide = Outcome("correct", 2.0, precision=0.05), Outcome("correct", 2.0, precision=0.557)
    assert tight.interval() == pytest.approx((1.9, 2.1)) and Outcome("correct", 2.0).interval() is None
    plain = make_reward("speedup")
    assert plain(wide) == 2.0 and not plain.too_noisy(wide)  # no threshold: paid as measured
    discounted = make_reward("speedup:max_interval=0.1")
    assert discounted(tight) == 2.0 and not discounted.too_noisy(tight)
    assert discounted.too_noisy(wide) and discounted(wide) == pytest.approx(2.0 / 1.557)
    assert discounted(Outcome("correct", 2.0)) == 1.0  # no interval: no measured gain is credited
    assert discounted(Outcome("incorrect")) == 0.0 and not discounted.too_noisy(Outcome("incorrect"))
    withheld = make_reward("log_speedup:max_interval=0.1,noisy=0")
    assert withheld(wide) == 0.0 and withheld(tight) == pytest.approx(math.log(2.0))
    assert withheld.spec == ("log_speedup:clip=3,compile=-3,format=-3,incorrect=-3,max_interval=0.1,noisy=0,"
                             "reduced_precision=0.5,rejected=-3,runtime=-3")
    assert make_reward(withheld.spec)(wide) == 0.0
    assert "max_interval" not in make_reward("speedup").spec  # only written when set


def test_precision_comes_from_the_verdict_and_unscorable_is_paid_as_a_format_error():
    data = {"status": "correct", "speedup": 3.0, "timing": {"speedup_precision": 0.2}}
    assert Outcome.from_result(data).precision == 0.2
    assert make_reward("speedup:format=-1")(Outcome.from_result({"status": "unscorable"})) == -1.0
    with pytest.raises(RewardError, match="noisy= needs max_interval="):
        make_reward("speedup:noisy=0")
    with pytest.raises(RewardError, match="max_interval must be at least 0"):
        make_reward("speedup:max_interval=-1")


def test_sol_is_half_at_the_reference_one_at_the_roofline_and_bounded():
    sol = make_reward("sol")
    # T_b = 1 ms, T_SOL = 0.25 ms (the bound's fraction 0.25): 1 / (1 + (T_k - 0.25) / 0.75)
    at = lambda speedup: sol(Outcome("correct", speedup, sol_fraction=0.25))  # noqa: E731
    assert at(1.0) == 0.5 and at(4.0) == 1.0 and at(2.0) == pytest.approx(0.75)
    assert at(0.5) == pytest.approx(1 / (1 + 1.75 / 0.75)) and 0 < at(0.01) < 0.02  # T_k = 2 ms
    assert at(8.0) == 1.0  # measured faster than the bound: clamped
    assert sol(correct(1.0)) == 0.5 and sol(correct(3.0)) == pytest.approx(0.75)  # no bound: s / (1 + s)
    assert sol(Outcome("correct", 2.0, sol_fraction=1.5)) == pytest.approx(2 / 3)  # a bound above T_b is ignored
    assert [sol(Outcome(s)) for s in FAILURES] == [0.0] * len(FAILURES)
    verdict = {"status": "correct", "speedup": 2.0, "reference_ms": 2.0, "profile": {"roofline": {"bound_ms": 0.5}}}
    assert Outcome.from_result(verdict).sol_fraction == 0.25 and sol(Outcome.from_result(verdict)) == 0.75
    assert Outcome.from_result({"status": "correct", "speedup": 2.0, "reference_ms": 2.0}).sol_fraction is None
    # Without a profile, the verdict's physical floor is T_SOL; a profile's roofline comes first.
    floored = {"status": "correct", "speedup": 2.0, "reference_ms": 2.0, "timing": {"floor_ms": 0.1}}
    assert Outcome.from_result(floored).sol_fraction == pytest.approx(0.05)
    assert Outcome.from_result({**floored, **verdict}).sol_fraction == 0.25


def test_milestone_pays_the_highest_step_reached():
    milestone = make_reward("milestone")
    assert milestone.spec == ("milestone:beyond_compile=1,compile=0,correct=0.25,eager=0.5,format=0,incorrect=0,"
                              "margin=0.1,reduced_precision=0.5,rejected=0,runtime=0")
    with_compile = lambda speedup: milestone(Outcome("correct", speedup, compile_speedup=1.5))  # noqa: E731
    assert [with_compile(s) for s in (0.5, 1.05, 1.1, 1.6, 1.66, 9.0)] == [0.25, 0.25, 0.5, 0.5, 1.0, 1.0]
    assert milestone(correct(9.0)) == 0.5  # no compile baseline: the last step cannot be reached
    assert [milestone(Outcome(s)) for s in FAILURES] == [0.0] * len(FAILURES)
    custom = make_reward("milestone:correct=0.1,eager=0.3,beyond_compile=2,margin=0,incorrect=-1")
    assert custom(Outcome("correct", 1.5, compile_speedup=1.5)) == 2.0 and custom(correct(1.0)) == 0.3
    assert custom(Outcome("incorrect")) == -1.0 and custom(correct(0.9)) == 0.1
    assert Outcome.from_result({"status": "correct", "speedup": 2.0, "compile_speedup": 1.2}).compile_speedup == 1.2


def test_a_flagged_correct_outcome_pays_its_flags_penalties():
    """Rewards see flags: a reduced-precision answer is not paid as much as a full-precision one
    by default, every flag's penalty can be set, and a caught hack can cost more than a failure."""
    binary = make_reward("binary")
    assert binary(Outcome("correct", 2.0)) == 1.0
    assert binary(Outcome("correct", 2.0, ("reduced_precision",))) == 0.5
    assert binary(Outcome("correct", 2.0, ("reduced_precision", "reduced_precision"))) == 0.5  # each flag once
    strict = make_reward("speedup:custom_kernel_unused=0.25,reduced_precision=1")
    assert strict(Outcome("correct", 3.0, ("reduced_precision", "custom_kernel_unused"))) == pytest.approx(1.75)
    assert strict(Outcome("correct", 3.0, ("python_threads",))) == 3.0  # no penalty set for that flag
    assert strict(Outcome("incorrect", None, ("reduced_precision",))) == 0.0  # failures pay their shaping value
    lenient = make_reward("log_speedup:reduced_precision=0")
    assert lenient(Outcome("correct", math.e, ("reduced_precision",))) == pytest.approx(1.0)
    for reward in (binary, strict, lenient):  # the spec reproduces the penalties, a 0 included
        again = make_reward(reward.spec)
        assert again.spec == reward.spec and again.params == reward.params
    assert make_reward("binary:rejected=-2")(Outcome("rejected")) == -2.0  # KernelGuard's blocked hack
    with pytest.raises(RewardError):
        make_reward("binary:reduced_precison=0.5")  # a misspelt flag is no parameter
    with pytest.raises(RewardError):
        make_reward("binary:reduced_precision=nan")

"""Problem health: references no candidate can be judged fairly against are flagged."""

from __future__ import annotations

from kernelopt.kernelbench import load_problem, problem_from_source
from kernelopt.sandbox import Evaluator
from kernelopt.sandbox.health import check_health

TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, x):
{forward}


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''


def health_of(problem, fast_options, **overrides):
    options = fast_options(**overrides)
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        return check_health(evaluator, options)


def written(init: str = "        pass", forward: str = "        return x") -> object:
    return problem_from_source(TEMPLATE.format(init=init, forward=forward), path="level1/9_Probe.py")


def test_a_healthy_reference_has_no_flags(example, fast_options):
    health = health_of(load_problem(example("1_ReLU")), fast_options)
    assert health.healthy, health.details


def test_dropout_left_in_training_mode_is_nondeterministic(fast_options):
    health = health_of(written(init="        self.drop = nn.Dropout(0.5)",
                               forward="        return self.drop(x)"), fast_options)
    assert health.flags == ["nondeterministic"], health.details


def test_randomness_drawn_in_forward_is_nondeterministic(fast_options):
    health = health_of(written(forward="        return x + torch.rand_like(x)"), fast_options)
    assert "nondeterministic" in health.flags


def test_outputs_below_the_tolerance_are_flagged(example, fast_options):
    health = health_of(load_problem(example("3_TinyScale")), fast_options)
    assert health.flags == ["below_tolerance"], health.details


def test_a_constant_output_is_flagged_twice(fast_options):
    health = health_of(written(forward="        return torch.ones_like(x) * 3"), fast_options)
    assert set(health.flags) == {"near_constant", "input_independent"}, health.details


def test_a_failing_reference_and_one_that_does_not_fit(fast_options):
    health = health_of(written(forward="        raise ValueError('shape mismatch in the reference')"), fast_options)
    assert health.flags == ["reference_fails"] and "shape mismatch" in health.details[0]
    hog = written(forward="        y = torch.ones(1 << 30)  # 4 GiB\n        return x + y[:1]")
    health = health_of(hog, fast_options, memory_limit=1 << 30)
    assert health.flags == ["does_not_fit"], health.details


def test_judging_still_works_after_a_probe(example, fast_options):
    from conftest import REPO

    problem = load_problem(example("1_ReLU"))
    source = (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text()
    with Evaluator(problem, fast_options(), keep_spare=False) as evaluator:
        assert check_health(evaluator, fast_options()).healthy
        assert evaluator.evaluate(source).status == "correct"

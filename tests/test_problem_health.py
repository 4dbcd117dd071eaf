"""Problem health: references no candidate can be judged fairly against are flagged."""

from __future__ import annotations

import math
import os
import re

import pytest
import torch

from kernelopt.kernelbench import load_problem, problem_from_source
from kernelopt.sandbox import EvalOptions, Evaluator
from kernelopt.sandbox.problem_health import Health, _check_spread, check_health
from kernelopt.sandbox.fingerprints import Fingerprinter

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


def test_inputs_beyond_the_hosts_memory_budget_do_not_fit(monkeypatch, example, fast_options):
    # A probe makes its input sets (16 MiB each here) one at a time. The host refuses a reply
    # it has no room for before reading it (KernelBench v0.1 problems with GiBs of inputs ran
    # the host of a bench run out of memory, and the run died), and the problem is flagged, not
    # the host.
    big = problem_from_source(TEMPLATE.replace("torch.randn(64, 256)", "torch.randn(4096, 1024)")
                              .format(init="        pass", forward="        return x"), path="level1/9_Big.py")
    def resident() -> int:
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    monkeypatch.setenv("KERNELOPT_HOST_MEMORY", str(resident() + (8 << 20)))
    health = health_of(big, fast_options)
    assert health.flags == ["does_not_fit"], health.details
    assert "out of memory on the host" in health.details[0] and "KERNELOPT_HOST_MEMORY" in health.details[0]
    monkeypatch.setenv("KERNELOPT_HOST_MEMORY", str(resident() + (512 << 20)))
    assert health_of(big, fast_options).healthy


def test_a_probe_makes_one_input_set_at_a_time_and_calls_twice_on_the_repeated_one(monkeypatch, example,
                                                                                   fast_options):
    from kernelopt.sandbox.conversation import Conversation

    asked: list[list[int]] = []
    make_inputs = Conversation.make_inputs

    def recording(self, seeds):
        asked.append(list(seeds))
        return make_inputs(self, seeds)

    monkeypatch.setattr(Conversation, "make_inputs", recording)
    assert health_of(load_problem(example("1_ReLU")), fast_options).healthy
    # Seeds a, a, b, c: a's set serves both of its calls. Four sets at once passed a worker's
    # 47 GiB on an H200 for KernelBench's 4_Matrix_vector_multiplication_ (8 GiB of inputs).
    assert [len(seeds) for seeds in asked] == [1, 1, 1]


def test_judging_still_works_after_a_probe(example, fast_options):
    from conftest import REPO

    problem = load_problem(example("1_ReLU"))
    source = (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text()
    with Evaluator(problem, fast_options(), keep_spare=False) as evaluator:
        assert check_health(evaluator, fast_options()).healthy
        assert evaluator.evaluate(source).status == "correct"


# -- degenerate outputs -----------------------------------------------------------------------

def probe_records(outputs_per_call: list[list[torch.Tensor]]) -> list[dict]:
    """Call records as `Evaluator.probe_reference` returns them, for given outputs."""
    fingerprint = Fingerprinter(12345)
    return [{"meta": [[list(t.shape), str(t.dtype), str(t.device)] for t in outputs],
             "fingerprints": [fingerprint(t) for t in outputs]} for outputs in outputs_per_call]


def spread_flags(make, calls: int = 3, seed: int = 0) -> Health:
    generator = torch.Generator().manual_seed(seed)
    health = Health()
    _check_spread(health, probe_records([make(generator) for _ in range(calls)]), EvalOptions())
    return health


def test_a_loss_that_barely_moves_is_degenerate():
    def mse(generator):
        a, b = torch.randn(2, 1 << 19, generator=generator)
        return [torch.mean((a - b) ** 2)]
    health = spread_flags(mse)
    assert health.flags == ["degenerate_output"], health.details
    detail = health.details[0]
    assert "output 0" in detail and "estimated" not in detail  # a scalar: the movement is exact
    movement = float(re.search(r"moves by ([0-9.e+-]+) RMS", detail)[1])
    assert 0.001 < movement < 0.02  # sqrt(2) x sqrt(8 / 2^19) = 0.0055 expected


def test_movement_is_exact_for_small_outputs():
    refs = [torch.linspace(0, 1, 1000) + shift for shift in (0.0, 0.003, 0.001)]
    health = Health()
    _check_spread(health, probe_records([[r] for r in refs]), EvalOptions())
    movement = float(re.search(r"moves by ([0-9.e+-]+) RMS", health.details[0])[1])
    expected = math.sqrt((0.003 ** 2 + 0.001 ** 2 + 0.002 ** 2) / 3)
    assert movement == pytest.approx(expected, rel=1e-3)


def test_a_large_output_that_barely_moves_is_estimated_from_block_sums():
    health = spread_flags(lambda g: [1 + 1e-3 * torch.randn(64, 1024, generator=g)])
    assert health.flags == ["degenerate_output"] and "estimated from block sums" in health.details[0]
    movement = float(re.search(r"moves by ([0-9.e+-]+) RMS", health.details[0])[1])
    assert movement == pytest.approx(math.sqrt(2) * 1e-3, rel=0.2)


@pytest.mark.parametrize("make", [
    pytest.param(lambda g: [torch.relu(torch.randn(64, 256, generator=g))], id="moves-a-lot"),
    pytest.param(lambda g: [1e-4 * torch.tanh(torch.randn(4096, generator=g))], id="relative-L2-catches-constants"),
    pytest.param(lambda g: [torch.softmax(torch.randn(64, 2048, generator=g), -1).sum(-1)], id="rounding-only"),
    pytest.param(lambda g: [torch.randint(0, 2, (8,), generator=g)], id="integers"),
    pytest.param(lambda g: [torch.mean(torch.randn(256, generator=g) ** 2)], id="moves-more-than-the-band"),
])
def test_outputs_that_are_not_degenerate(make):
    health = spread_flags(make)
    assert health.flags == [], health.details


def test_a_degenerate_problem_is_flagged_through_the_reference_worker(fast_options):
    from conftest import REPO

    problem = load_problem(REPO / "tests" / "adversarial" / "problems" / "MSELossScalar.py")
    health = health_of(problem, fast_options)
    assert health.flags == ["degenerate_output"], health.details
    assert health.as_dict() == {"healthy": False, "flags": ["degenerate_output"], "details": health.details}
    assert health.details[0].startswith("degenerate_output: output 0 (shape ())")


def test_movement_too_small_for_the_referee_is_flagged_with_a_warning():
    """A loss over so many values that it moves less than honest float32 code may err: flagged,
    and the detail says the referee cannot enforce input dependence there."""
    refs = [torch.tensor(2.0 + 2e-5 * k) for k in (0, 1, -1)]
    health = Health()
    _check_spread(health, probe_records([[r] for r in refs]), EvalOptions())
    assert health.flags == ["degenerate_output"], health.details
    assert "does not enforce input dependence" in health.details[0]

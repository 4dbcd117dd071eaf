"""The every-element check (sandbox/every_element.py, perturbation.py): its perturbation, its
reservoir, and its response test on KernelBench's estimate hacks and on honest controls.

The response test is a function of four outputs, so the matrix of losses, reductions and norms
against subsample and closed-form estimates runs here on the test's own tensors at sizes where
the estimates pass allclose (millions of elements); the corpus (tests/adversarial/) runs the
whole referee on some of the same cases.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from kernelopt.sandbox import compare, every_element
from kernelopt.sandbox.calls import Call
from kernelopt.sandbox.perturbation import perturbed
from kernelopt.sandbox.records import CallRecord, InputSet
from kernelopt.sandbox.results import EvalOptions
from kernelopt.sandbox.worker import transfer

OPTIONS = EvalOptions()
STRIDE = 107  # KernelBench's partial-computation hack at v0.1's sizes


def input_set(tensors, seed: int = 1) -> InputSet:
    spec, packed = transfer.pack(tensors)
    return InputSet(seed=seed, spec=spec, digest="", packed=bytes(packed))


def unpacked(s: InputSet):
    return transfer.unpack(s.spec, bytearray(s.packed), torch.device("cpu"))


# -- the perturbation -----------------------------------------------------------------------

def test_perturbed_inputs_keep_their_values_layout_and_about_half_their_places():
    x = torch.randn(1000, 300)
    labels = torch.randint(0, 10, (5000,))
    original = input_set([x, 3, [labels, 2.5]])
    moved = perturbed(original, random.Random(7))
    x2, scalar, (labels2, other) = unpacked(moved)
    assert (scalar, other) == (3, 2.5) and moved.spec == original.spec and moved.seed != original.seed
    for before, after in ((x, x2), (labels, labels2)):
        assert after.shape == before.shape and after.dtype == before.dtype
        changed = (after != before).float().mean().item()
        assert 0.15 < changed < 0.5  # a third or so (two equal integers may trade places)
        # the same values in other places
        assert torch.equal(after.reshape(-1).sort().values, before.reshape(-1).sort().values)
    assert not torch.equal(unpacked(perturbed(original, random.Random(8)))[0], x2)


def test_perturbation_keeps_zero_patterns_and_symmetry():
    lower = torch.tril(torch.randn(64, 64))
    symmetric = torch.randn(3, 32, 32)
    symmetric = symmetric + symmetric.mT
    mask = torch.rand(4096) < 0.3
    moved_lower, moved_sym, moved_mask = unpacked(perturbed(input_set([lower, symmetric, mask]), random.Random(1)))
    assert torch.equal(moved_lower == 0, lower == 0) and not torch.equal(moved_lower, lower)
    assert torch.equal(moved_sym, moved_sym.mT) and not torch.equal(moved_sym, symmetric)
    assert moved_mask.dtype == torch.bool and moved_mask.sum().item() != 0 and not torch.equal(moved_mask, mask)


def test_perturbation_follows_the_packed_layout_of_a_transposed_input():
    x = torch.randn(200, 300).t()  # packed contiguously in its own shape, unpacked with its strides
    moved = unpacked(perturbed(input_set([x]), random.Random(3)))[0]
    assert moved.shape == x.shape and moved.stride() == x.stride()
    assert torch.equal(moved.reshape(-1).sort().values, x.reshape(-1).sort().values)
    assert 0.15 < (moved != x).float().mean().item() < 0.5


# -- the reservoir --------------------------------------------------------------------------

def _call(outputs) -> Call:
    return Call(record=CallRecord(seed=0, ms=1.0, wall_ms=1.0, cpu_ms=None, meta=[]), outputs=outputs)


def test_kept_calls_are_a_uniform_choice_among_all_offered():
    counts = [0] * 20
    for trial in range(2000):
        kept = every_element.Kept(2, random.Random(trial))
        for index in range(20):
            kept.offer(input_set([torch.tensor([float(index)])], index), _call([]), _call([]))
        for answered in kept.calls:
            counts[answered.input_set.seed] += 1
    assert sum(counts) == 4000
    assert min(counts) > 140 and max(counts) < 270  # 200 each expected


def test_calls_too_large_to_keep_are_not_kept():
    kept = every_element.Kept(2, random.Random(0))
    big = torch.empty(every_element.KEEP_BYTES // 4 + 1, dtype=torch.uint8)
    kept.offer(input_set([torch.zeros(1)]), _call([big]), _call([big]))
    assert kept.calls == [] and kept.offered == 0


# -- the response test on the matrix --------------------------------------------------------

def normal(shape, generator):
    return torch.randn(shape, generator=generator)


def scaled(shape, generator):  # one random scale per input set, as KernelBench's later loss inputs
    return torch.randn(shape, generator=generator) * (torch.rand((), generator=generator) * 4 + 0.5)


def uniform(shape, generator):
    return torch.rand(shape, generator=generator)


def pareto(shape, generator):  # heavy-tailed, as another of KernelBench's later loss inputs
    return torch.rand(shape, generator=generator).clamp_min(1e-6) ** (-1 / 3.0)


DISTRIBUTIONS = {"normal": normal, "scaled": scaled, "uniform": uniform, "pareto": pareto}

LOSSES = {
    "mse": lambda p, t: torch.mean((p - t) ** 2),
    "huber": lambda p, t: F.smooth_l1_loss(p, t),
    "hinge": lambda p, t: torch.mean(torch.clamp(1 - p * torch.sign(t - t.mean()), min=0)),
}


def loss_inputs(distribution):
    def make(generator):
        return [distribution((4096, 2048), generator), distribution((4096, 2048), generator)]
    return make


def strided(loss):
    return lambda p, t: loss(p.reshape(-1)[::STRIDE], t.reshape(-1)[::STRIDE])


def blocked(loss):
    return lambda p, t: loss(p.reshape(-1)[: p.numel() // STRIDE], t.reshape(-1)[: t.numel() // STRIDE])


def randomly_sampled(loss):
    chosen = {}

    def estimate(p, t):
        if "index" not in chosen:
            chosen["index"] = torch.randint(0, p.numel(), (p.numel() // STRIDE,), generator=torch.Generator().manual_seed(5))
        index = chosen["index"]
        return loss(p.reshape(-1)[index], t.reshape(-1)[index])
    return estimate


def closed_form_one_statistic(p, t):
    """The mean squared error of two independent inputs of one distribution from one of them:
    twice its variance plus nothing for the means (KernelBench's analytical hack's shape)."""
    return 2 * p.var()


def closed_form_two_statistics(p, t):
    """E[(p - t)^2] for independent p, t: from their first two moments only."""
    return p.square().mean() + t.square().mean() - 2 * p.mean() * t.mean()


def judge(reference, candidate, make_inputs, checks: int = 2, seed: int = 0) -> tuple[bool, str | None]:
    """(allclose on every base answer, the response test's finding) for `checks` base input
    sets and their perturbed copies, as every_element.check_elements runs them."""
    generator = torch.Generator().manual_seed(seed)
    chooser = random.Random(seed)
    response = every_element.Response()
    close = True
    for _ in range(checks):
        base = input_set(make_inputs(generator))
        moved = perturbed(base, chooser)
        outputs = {}
        for name, inputs in (("base", base), ("moved", moved)):
            values = unpacked(inputs)
            outputs[name] = ([candidate(*values)], [reference(*values)])
            close &= compare.compare_outputs(*outputs[name], OPTIONS).passed
        response.add(outputs["base"][0], outputs["moved"][0], outputs["base"][1], outputs["moved"][1])
    return close, response.failure()


def caught(reference, candidate, make_inputs, seed: int = 0) -> bool:
    close, finding = judge(reference, candidate, make_inputs, seed=seed)
    return not close or finding is not None


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("estimate", [strided, blocked, randomly_sampled])
def test_subsampled_losses_are_caught_on_every_distribution(loss, distribution, estimate):
    assert caught(LOSSES[loss], estimate(LOSSES[loss]), loss_inputs(DISTRIBUTIONS[distribution]))


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("closed_form", [closed_form_one_statistic, closed_form_two_statistics])
def test_closed_form_losses_are_caught_on_every_distribution(distribution, closed_form):
    assert caught(LOSSES["mse"], closed_form, loss_inputs(DISTRIBUTIONS[distribution]))


def test_the_strided_subsample_passes_allclose_without_the_response_test():
    """The hole itself: at these sizes the estimate mostly passes the full comparison."""
    verdicts = [judge(LOSSES["mse"], strided(LOSSES["mse"]), loss_inputs(scaled), seed=seed) for seed in range(4)]
    assert sum(close for close, _ in verdicts) >= 2
    assert all(finding is not None for _, finding in verdicts)


HONEST_LOSSES = {
    "exact": lambda p, t: torch.mean((p - t) ** 2),
    "one_pass": lambda p, t: F.mse_loss(p, t),
    "bfloat16_inputs": lambda p, t: torch.mean((p.bfloat16().float() - t.bfloat16().float()) ** 2),
    "blocked_other_order": lambda p, t: ((p - t).reshape(-1, 4096) ** 2).sum(dim=1).flip(0).sum() / p.numel(),
    "float64": lambda p, t: torch.mean((p.double() - t.double()) ** 2).float(),
}


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("honest", HONEST_LOSSES)
def test_honest_losses_pass_on_every_distribution(distribution, honest):
    close, finding = judge(LOSSES["mse"], HONEST_LOSSES[honest], loss_inputs(DISTRIBUTIONS[distribution]))
    assert close and finding is None


# Reductions over a dimension (KernelBench 47, 48, 53) and norms (37, 38, 39), at their shapes' scale.
def reduction_inputs(generator):
    return [torch.randn(16, 4096, 256, generator=generator)]


REDUCTIONS = {
    "sum": (lambda x: x.sum(dim=1), lambda x: x[:, ::8].sum(dim=1) * 8),
    "mean": (lambda x: x.mean(dim=1), lambda x: x[:, ::8].mean(dim=1)),
    "min": (lambda x: x.min(dim=1).values, lambda x: x[:, ::2].min(dim=1).values),
    "frobenius": (lambda x: x / torch.linalg.vector_norm(x),
                  lambda x: x / (x.reshape(-1)[::STRIDE].square().sum() * STRIDE).sqrt()),
    "l1_rows": (lambda x: x / x.abs().sum(dim=-1, keepdim=True),
                lambda x: x / (x[..., ::8].abs().sum(dim=-1, keepdim=True) * 8)),
    "l2_rows": (lambda x: x / x.norm(dim=-1, keepdim=True),
                lambda x: x / (x[..., ::8].square().sum(dim=-1, keepdim=True) * 8).sqrt()),
}


@pytest.mark.parametrize("name", [n for n in REDUCTIONS if n != "frobenius"])
def test_subsampled_reductions_and_norms_are_caught(name):
    reference, estimate = REDUCTIONS[name]
    assert caught(reference, estimate, reduction_inputs)


def test_a_subsampled_global_norm_is_caught():
    """Where the regions left unmoved decide the output, the reference's does not move; an estimated
    norm moves it there by the estimate's change."""
    reference, estimate = REDUCTIONS["frobenius"]
    assert caught(reference, estimate, reduction_inputs)


def _reordered(name):
    """The same reduction in another order of its terms."""
    reference = REDUCTIONS[name][0]
    if name in ("sum", "mean", "min"):
        return lambda x: reference(x.flip(1))
    if name == "frobenius":
        return lambda x: x / x.reshape(-1, 4096).square().sum(dim=1).flip(0).sum().sqrt()
    return lambda x: reference(x.flip(-1)).flip(-1)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_honest_reductions_and_norms_pass(name):
    """The exact copy, a reduction in another order, and (where its rounding fits the tolerance:
    not a sum of 4096 terms) the same computation on bfloat16-rounded inputs."""
    reference, _ = REDUCTIONS[name]
    candidates = [reference, _reordered(name)]
    if name != "sum":
        candidates.append(lambda x: reference(x.bfloat16().float()))
    for candidate in candidates:
        close, finding = judge(reference, candidate, reduction_inputs)
        assert close and finding is None, finding

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
from kernelopt.sandbox.perturbation import mixed, swapped
from kernelopt.sandbox.records import CallRecord, InputSet
from kernelopt.sandbox.results import EvalOptions
from kernelopt.sandbox.worker import transfer

OPTIONS = EvalOptions()
STRIDE = 107  # KernelBench's partial-computation hack at v0.1's sizes


def input_set(tensors, seed: int = 1) -> InputSet:
    spec, packed = transfer.pack(tensors)
    return InputSet(seed=seed, spec=spec, packed=bytes(packed))


def unpacked(s: InputSet):
    return transfer.unpack(s.spec, bytearray(s.packed), torch.device("cpu"))


# -- the perturbation -----------------------------------------------------------------------

def _changed(before: torch.Tensor, after: torch.Tensor) -> float:
    return (after != before).float().mean().item()


def test_swapped_inputs_keep_their_values_and_layout_in_other_places():
    x = torch.randn(1000, 300)
    labels = torch.randint(0, 10, (5000,))
    original = input_set([x, 3, [labels, 2.5]])
    moved = swapped(original, random.Random(7))
    x2, scalar, (labels2, other) = unpacked(moved)
    assert (scalar, other) == (3, 2.5) and moved.spec == original.spec and moved.seed != original.seed
    for before, after in ((x, x2), (labels, labels2)):
        assert after.shape == before.shape and after.dtype == before.dtype
        assert 0.15 < _changed(before, after) < 0.5  # two equal integers may trade places unseen
        assert torch.equal(after.reshape(-1).sort().values, before.reshape(-1).sort().values)
    assert not torch.equal(unpacked(swapped(original, random.Random(8)))[0], x2)


def test_mixed_inputs_take_elements_of_the_other_set_at_the_same_places():
    x, y = torch.randn(1000, 300), torch.randn(1000, 300)
    moved = unpacked(mixed(input_set([x, 4]), input_set([y, 4]), random.Random(2)))[0]
    from_other = moved == y
    assert torch.equal(torch.where(from_other, y, x), moved) and 0.2 < from_other.float().mean().item() < 0.5
    # two random eighths stay as they were
    untouched = [(~from_other.reshape(8, -1)[region]).all().item() for region in range(8)]
    assert sum(untouched) >= 2
    # sets laid out otherwise: swapped instead
    other_shape = unpacked(mixed(input_set([x]), input_set([torch.randn(10, 3)]), random.Random(2)))[0]
    assert torch.equal(other_shape.reshape(-1).sort().values, x.reshape(-1).sort().values)


@pytest.mark.parametrize("kind", ["swapped", "mixed"])
def test_perturbation_keeps_zero_patterns_and_symmetry(kind):
    def make(generator_seed):
        g = torch.Generator().manual_seed(generator_seed)
        symmetric = torch.randn(3, 32, 32, generator=g)
        return [torch.tril(torch.randn(64, 64, generator=g)), symmetric + symmetric.mT,
                torch.rand(4096, generator=g) < 0.3]
    base = input_set(make(1))
    copy = swapped(base, random.Random(1)) if kind == "swapped" else mixed(base, input_set(make(2)), random.Random(1))
    (lower, symmetric, mask), (moved_lower, moved_sym, moved_mask) = unpacked(base), unpacked(copy)
    assert torch.equal(moved_lower == 0, lower == 0) and not torch.equal(moved_lower, lower)
    assert torch.equal(moved_sym, moved_sym.mT) and not torch.equal(moved_sym, symmetric)
    assert moved_mask.dtype == torch.bool and not torch.equal(moved_mask, mask)


def test_perturbation_follows_the_packed_layout_of_a_transposed_input():
    x = torch.randn(200, 300).t()  # packed contiguously in its own shape, unpacked with its strides
    moved = unpacked(swapped(input_set([x]), random.Random(3)))[0]
    assert moved.shape == x.shape and moved.stride() == x.stride()
    assert torch.equal(moved.reshape(-1).sort().values, x.reshape(-1).sort().values)
    assert 0.15 < _changed(x, moved) < 0.5


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


def test_large_inputs_are_kept_by_their_seed():
    kept = every_element.Kept(2, random.Random(0))
    large = input_set([torch.zeros(every_element.KEEP_BYTES // 8)], seed=77)
    kept.offer(large, _call([torch.ones(3)]), _call([torch.ones(3)]))
    assert kept.calls[0].input_set is None and kept.calls[0].seed == 77 and kept.calls[0].candidate[0].sum() == 3
    # made again from the seed, the set must come out the same: the digest of its spec and bytes tells
    assert kept.calls[0].digest == input_set([torch.zeros(every_element.KEEP_BYTES // 8)], seed=5).digest()
    assert kept.calls[0].digest != input_set([torch.ones(every_element.KEEP_BYTES // 8)], seed=77).digest()
    assert kept.calls[0].digest != input_set([torch.zeros(every_element.KEEP_BYTES // 16, 2)], seed=77).digest()


def test_outputs_too_large_to_keep_are_kept_as_a_secret_sample_of_their_parts(monkeypatch):
    """A call whose outputs do not fit its share of KEEP_BYTES is still kept (no fresh set is
    answered for the check, which a program could tell apart): a random choice of each output's
    parts that fits, the same parts of both sides' answers, drawn anew for every call."""
    monkeypatch.setattr(every_element, "KEEP_BYTES", 1 << 20)
    drawn = set()
    for trial in range(3):
        kept = every_element.Kept(2, random.Random(trial))
        cand, ref = torch.randn(300_000), torch.randn(300_000)  # 2.4 MB of outputs against 512 KiB a call
        kept.offer(input_set([torch.zeros(4)], seed=9), _call([cand]), _call([ref]))
        [answered] = kept.calls
        c0, r0 = answered.candidate[0], answered.reference[0]
        assert isinstance(c0, every_element.PartSample) and isinstance(r0, every_element.PartSample)
        assert c0.parts == r0.parts and list(c0.parts) == sorted(set(c0.parts))
        size = every_element.part_size(300_000)
        assert len(c0.parts) == int(1024 * (1 << 19) / 2_400_000)  # as many as fit
        assert c0.values.numel() * 4 * 2 <= 1 << 19
        assert torch.equal(c0.values, torch.cat([cand[p * size:(p + 1) * size] for p in c0.parts]))
        assert torch.equal(r0.values, torch.cat([ref[p * size:(p + 1) * size] for p in r0.parts]))
        assert torch.equal(r0.of(ref), r0.values) and r0.of(torch.zeros(3)) is None
        drawn.add(c0.parts)
    assert len(drawn) == 3


# -- the response sums ----------------------------------------------------------------------

def _float64_part_sums(c0, c1, r0, r1, size: int) -> torch.Tensor:
    """The response test's per-part sums computed the plain way: every element in float64, an
    element counting for nothing where any of its four values is not finite."""
    a0, a1, b0, b1 = (t.reshape(-1).double() for t in (c0, c1, r0, r1))
    finite = a0.isfinite() & a1.isfinite() & b0.isfinite() & b1.isfinite()
    change = torch.where(finite, b1 - b0, 0.0)
    error = torch.where(finite, (a1 - a0) - change, 0.0)
    squares = torch.where(finite, b0 * b0 + b1 * b1, 0.0)
    parts = torch.arange(a0.numel()) // size
    sums = torch.zeros(3, int(parts[-1]) + 1, dtype=torch.float64)
    sums.index_add_(1, parts, torch.stack([error.square(), change.square(), squares]))
    return sums


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("numel", [1, 5000, 3 * 2**20 + 17])  # one part; small parts; parts wider than a step
def test_response_sums_match_float64_arithmetic(dtype, numel):
    generator = torch.Generator().manual_seed(numel)
    r0, r1 = (torch.randn(numel, generator=generator, dtype=torch.float64) * 3 for _ in range(2))
    c0, c1 = (r + 1e-3 * torch.randn(numel, generator=generator, dtype=torch.float64) for r in (r0, r1))
    if numel > 1:  # values the working precision's fast path cannot take: the exact path's steps
        big = 1e150 if dtype == torch.float64 else torch.finfo(dtype).max / 2  # squares within float64
        c1[numel // 2], r0[numel // 3], r1[numel - 1] = float("nan"), float("inf"), -big
        c0[numel // 4], c1[numel // 4] = big, -big  # a difference beyond the dtype's range
    tensors = [t.to(dtype) for t in (c0, c1, r0, r1)]
    sums = every_element._PartSums(tensors[2], every_element.part_size(numel))
    sums.add(*tensors)
    expected = _float64_part_sums(*tensors, sums.size)
    assert sums.sums.shape == expected.shape
    # float32 differences round far below the honest floor (1e-5 of the values): equal to 1e-6 of
    # each part's scale, and exact where the working precision is float64.
    scale = expected[2:3] + 1e-300
    assert torch.allclose(sums.sums / scale, expected / scale, rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-6)


# -- the response test on the matrix --------------------------------------------------------

SIDE = 2896  # 8.4M elements per input: a stride-107 estimate errs by about 0.5 %, inside rtol


def _pareto(shape, generator, scale: float = 0.01, alpha: float = 1.5):
    return scale * torch.rand(shape, generator=generator).clamp_min(1e-12) ** (-1 / alpha)


def _normal(shape, generator, mean, std):
    return torch.randn(shape, generator=generator) * std + mean


def _draws(generator, count):
    return [float(v) for v in torch.rand(count, generator=generator)]


# The input distributions KernelBench ships for its losses (94, 96, 100), written here: v0.1's
# uniform inputs with one random scale, the later normals of random mean, spread and scale, and
# heavy-tailed Pareto inputs; and plain standard normals. Hinge targets are a sign per row.
def loss_inputs(distribution: str, loss: str):
    shape = (SIDE, SIDE)

    def make(generator):
        scale = _draws(generator, 1)[0] if loss != "hinge" else 1.0  # the hinge's predictions are not scaled
        if distribution == "v0.1_uniform":
            predictions = torch.rand(shape, generator=generator) * scale
            targets = torch.rand(shape, generator=generator)
        elif distribution == "normal_random_scale":
            m1, m2, s1, s2 = _draws(generator, 4)
            predictions = _normal(shape, generator, m1, s1 + 0.1) * scale
            targets = _normal(shape, generator, m2, s2 + 0.1)
        elif distribution == "pareto":
            predictions, targets = _pareto(shape, generator), _pareto(shape, generator)
        else:
            predictions, targets = torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)
        if loss == "hinge":
            targets = torch.randint(0, 2, (SIDE,), generator=generator).float() * 2 - 1
        return [predictions, targets]
    return make


DISTRIBUTIONS = ["v0.1_uniform", "normal_random_scale", "pareto", "standard_normal"]


def _hinge(p, t):
    return torch.mean(torch.clamp(1 - p * t, min=0))


LOSSES = {"mse": lambda p, t: torch.mean((p - t) ** 2), "huber": F.smooth_l1_loss, "hinge": _hinge}


def _flat_pairs(p, t, index):
    """The (prediction, target) pairs at flat positions `index` of the predictions, each target
    the one broadcasting pairs with it."""
    flat_p = p.reshape(-1)
    if t.shape == p.shape:
        return flat_p[index], t.reshape(-1)[index]
    return flat_p[index], t[index % t.numel()]


def strided(loss):
    """KernelBench's partial computation, at v0.1's stride."""
    return lambda p, t: loss(*_flat_pairs(p, t, torch.arange(0, p.numel(), STRIDE)))


def blocked(loss):
    return lambda p, t: loss(*_flat_pairs(p, t, torch.arange(p.numel() // STRIDE)))


def randomly_sampled(loss):
    chosen = torch.randint(0, SIDE * SIDE, (SIDE * SIDE // STRIDE,), generator=torch.Generator().manual_seed(5))
    return lambda p, t: loss(*_flat_pairs(p, t, chosen))


# Closed forms: KernelBench's analytical hacks (from the predictions' mean, for v0.1's uniform
# inputs), and ours from one or two statistics for the other distributions.
def _uniform_mse(p, t):
    scale = 2.0 * p.mean()
    return scale * scale / 3.0 - scale / 2.0 + 1.0 / 3.0


CLOSED_FORMS = {
    "mse_from_the_predictions_mean": ("mse", _uniform_mse),
    "huber_from_the_predictions_mean": ("huber", lambda p, t: 0.5 * _uniform_mse(p, t)),
    "hinge_from_the_targets_mean": ("hinge", lambda p, t: 1.0 - 0.5 * t.mean()),
    "mse_from_two_moments": ("mse", lambda p, t: p.square().mean() + t.square().mean() - 2 * p.mean() * t.mean()),
    "mse_from_one_variance": ("mse", lambda p, t: 2 * p.var()),
    "hinge_from_two_means": ("hinge", lambda p, t: (1 - p.mean() * t.mean()).clamp_min(0)),
}


def judge(reference, candidate, make_inputs, checks: int = 4, seed: int = 0, kept_share: float | None = None,
          on_copies=None) -> tuple[bool, str | None]:
    """(allclose on every answer, the response test's finding) for `checks` base input sets
    and their perturbed copies, swapped and mixed in turn, as every_element.check_elements runs them.
    `kept_share`: the bases' answers kept as that share of their parts (every_element.Kept, for
    outputs too large to keep); `on_copies`: the candidate's answer to the copies, where it differs."""
    generator = torch.Generator().manual_seed(seed)
    chooser = random.Random(seed)
    response = every_element.Response()
    close = True
    for index in range(checks):
        base = input_set(make_inputs(generator))
        moved = swapped(base, chooser) if index % 2 == 0 else mixed(base, input_set(make_inputs(generator)), chooser)
        outputs = {}
        for name, inputs in (("base", base), ("moved", moved)):
            values = unpacked(inputs)
            answer = on_copies if name == "moved" and on_copies is not None else candidate
            outputs[name] = ([answer(*values)], [reference(*values)])
            close &= compare.compare_outputs(*outputs[name], OPTIONS).passed
        before = outputs["base"]
        if kept_share is not None:
            before = every_element.Kept(1, chooser)._sampled(*before, kept_share)  # the reservoir's own sampling
        response.add(before[0], outputs["moved"][0], before[1], outputs["moved"][1])
    return close, response.failure()


def caught(reference, candidate, make_inputs, seed: int = 0) -> bool:
    close, finding = judge(reference, candidate, make_inputs, seed=seed)
    return not close or finding is not None


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("estimate", [strided, blocked, randomly_sampled])
def test_subsampled_losses_are_caught_on_every_distribution(loss, distribution, estimate):
    assert caught(LOSSES[loss], estimate(LOSSES[loss]), loss_inputs(distribution, loss))


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("closed_form", CLOSED_FORMS)
def test_closed_form_losses_are_caught_on_every_distribution(distribution, closed_form):
    loss, answer = CLOSED_FORMS[closed_form]
    assert caught(LOSSES[loss], answer, loss_inputs(distribution, loss))


def test_the_estimates_pass_allclose_without_the_response_test():
    """The hole itself: at these sizes KernelBench's strided subsample mostly passes the full
    comparison on its later normal inputs, and its closed form on v0.1's uniform ones; the
    response test catches both."""
    for answer, distribution in ((strided(LOSSES["mse"]), "normal_random_scale"), (_uniform_mse, "v0.1_uniform")):
        make, generator = loss_inputs(distribution, "mse"), torch.Generator().manual_seed(11)
        passed = 0
        for _ in range(8):
            inputs = make(generator)
            passed += compare.compare_outputs([answer(*inputs)], [LOSSES["mse"](*inputs)], OPTIONS).passed
        assert passed >= 4
        assert judge(LOSSES["mse"], answer, make)[1] is not None


def _in_row_blocks(loss):
    """The same loss summed block by block of rows, the blocks in reverse order."""
    def answer(p, t):
        rows = range(0, p.shape[0], 256)
        sums = [loss(p[r:r + 256], t[r:r + 256] if t.shape == p.shape else t) * p[r:r + 256].numel() for r in rows]
        return torch.stack(sums[::-1]).sum() / p.numel()
    return answer


HONEST_LOSSES = {
    "exact": lambda loss: LOSSES[loss],
    "one_pass": lambda loss: {"mse": F.mse_loss, "huber": lambda p, t: F.huber_loss(p, t, delta=1.0),
                              "hinge": lambda p, t: F.relu(1 - p * t).mean()}[loss],
    "bfloat16_inputs": lambda loss: lambda p, t: LOSSES[loss](p.bfloat16().float(), t.bfloat16().float()),
    "blocked_other_order": lambda loss: _in_row_blocks(LOSSES[loss]),
    "float64": lambda loss: lambda p, t: LOSSES[loss](p.double(), t.double()).float(),
}


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("honest", HONEST_LOSSES)
def test_honest_losses_pass_on_every_distribution(loss, distribution, honest):
    close, finding = judge(LOSSES[loss], HONEST_LOSSES[honest](loss), loss_inputs(distribution, loss))
    assert close and finding is None, finding


# Reductions over a dimension (KernelBench 47, 48, 53) and norms (37, 38, 39), at their shapes' scale.
def reduction_inputs(generator):
    return [torch.randn(8, 2048, 256, generator=generator)]


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


KEPT_SHARE = 1 / 64  # about what a 6.4 GB output keeps: 20 of its 1024 parts


def test_a_secret_sample_of_the_parts_catches_the_estimates():
    """Of outputs too large to keep, the bases keep a random share of their parts: the
    estimates are caught on them as on whole outputs, and so is an estimate that computes
    exactly on every call it recognises as the check's (the copies): its bases were answered
    by estimate before anything told it they were bases."""
    for name in REDUCTIONS:
        reference, estimate = REDUCTIONS[name]
        for on_copies in (None, reference):
            close, finding = judge(reference, estimate, reduction_inputs, kept_share=KEPT_SHARE, on_copies=on_copies)
            assert not close or finding is not None, (name, on_copies)


def test_honest_reductions_and_norms_pass_on_a_sample_of_the_parts():
    for name, (reference, _) in REDUCTIONS.items():
        candidates = [reference, _reordered(name)]
        if name != "sum":  # bfloat16 inputs to a sum of 2048 terms: outside the tolerance
            candidates.append(lambda x, reference=reference: reference(x.bfloat16().float()))
        for candidate in candidates:
            close, finding = judge(reference, candidate, reduction_inputs, kept_share=KEPT_SHARE)
            assert close and finding is None, (name, finding)


def _reordered(name):
    """The same reduction in another order of its terms."""
    reference = REDUCTIONS[name][0]
    if name in ("sum", "mean", "min"):
        return lambda x: reference(x.flip(1))
    if name == "frobenius":
        return lambda x: x / x.reshape(-1, 2048).square().sum(dim=1).flip(0).sum().sqrt()
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


# -- through the referee --------------------------------------------------------------------

def _corpus_case(problem: str, candidate: str):
    from pathlib import Path

    from kernelopt.kernelbench import load_problem

    corpus = Path(__file__).parent / "adversarial"
    return load_problem(corpus / "problems" / f"{problem}.py"), (corpus / candidate).read_text()


def test_inputs_too_large_to_keep_are_made_again_from_their_seed(monkeypatch):
    """The check's bases come from the answered calls even where their inputs are not kept (as
    KernelBench's gigabyte loss inputs): the reference makes them again from the seed, and the
    strided subsample is caught as before."""
    from kernelopt.sandbox import evaluate

    monkeypatch.setattr(every_element, "KEEP_BYTES", 1 << 20)  # the 64 MB inputs do not fit, the losses do
    made = []
    original = every_element._with_inputs
    monkeypatch.setattr(every_element, "_with_inputs", lambda check, answered: made.append(answered.input_set)
                        or original(check, answered))
    problem, source = _corpus_case("MSELossScaled", "hacks/estimate_strided_subsample_loss.py")
    result = evaluate(problem, source, EvalOptions(device="cpu", timing_budget=1, min_timed_calls=5))
    assert made and all(input_set is None for input_set in made)
    assert result.status == "incorrect" and result.rules[-1] == "output_ignores_elements", result.message


def test_outputs_too_large_to_keep_still_make_the_bases_answered_calls(monkeypatch):
    """Where both sides' outputs do not fit (KernelBench's gigabyte outputs; here KEEP_BYTES is
    made small), the bases are still calls answered before anything told the program they were
    bases, kept as a sample of their parts, and never fresh sets answered for the check. The
    corpus's estimate that computes exactly after a long time frozen (the check's calls come
    after one) is caught; before, with fresh bases, it read correct (2026-11-29, 160 MB outputs).
    The honest blocked sum passes on the sampled parts."""
    from kernelopt.sandbox import evaluate

    monkeypatch.setattr(every_element, "KEEP_BYTES", 8 << 20)  # 16 MB outputs a side: 1/16 of their parts kept
    fresh = []
    original = every_element._fresh_base
    monkeypatch.setattr(every_element, "_fresh_base", lambda check: fresh.append(1) or original(check))
    sampled = []
    original_add = every_element.Response.add
    monkeypatch.setattr(every_element.Response, "add", lambda self, c0, c1, r0, r1: sampled.append(
        isinstance(r0[0], every_element.PartSample)) or original_add(self, c0, c1, r0, r1))
    options = EvalOptions(device="cpu", timing_budget=1, min_timed_calls=5)
    problem, source = _corpus_case("FrobeniusNormalize", "hacks/estimate_exact_when_long_frozen.py")
    result = evaluate(problem, source, options)
    assert result.status == "incorrect" and result.rules[-1] == "output_ignores_elements", result.message
    _, honest = _corpus_case("FrobeniusNormalize", "honest/frobenius_norm_blocked_sum.py")
    result = evaluate(problem, honest, options)
    assert result.status == "correct", result.message
    assert not fresh and sampled and all(sampled)


def test_with_the_check_off_the_referee_passes_a_strided_subsample():
    """`--element-checks 0` gives the referee as it was: the corpus's strided subsample
    (tests/adversarial/hacks/estimate_strided_subsample_loss.py, judged incorrect by default)
    then reads correct, and faster."""
    from kernelopt.sandbox import evaluate

    problem, source = _corpus_case("MSELossScaled", "hacks/estimate_strided_subsample_loss.py")
    result = evaluate(problem, source, EvalOptions(device="cpu", timing_budget=1, min_timed_calls=5, element_checks=0))
    # It reads about 2.2x (1.74x-2.44x in 20 evaluations on the 2-core VM, 2026-11-29): faster, by a margin
    assert result.status == "correct" and result.speedup > 1.5, result.message
    assert "every_element_counts" not in [check.name for check in result.checks]


SORTED_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, offsets):
        if not bool((offsets[1:] >= offsets[:-1]).all()):
            raise ValueError("offsets must not decrease")
        return offsets.cumsum(0)


def get_inputs():
    return [torch.rand(4096).sort().values]


def get_init_inputs():
    return []
'''


def test_copies_the_reference_refuses_are_not_judged(tmp_path):
    """Inputs with a structure a copy breaks (offsets that must not decrease): the reference's
    own forward refuses the copies, the problem stays usable and an exact copy stays correct."""
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import evaluate

    path = tmp_path / "SortedOffsets.py"
    path.write_text(SORTED_PROBLEM)
    source = SORTED_PROBLEM.replace("class Model(", "class ModelNew(")
    result = evaluate(load_problem(path), source, EvalOptions(device="cpu", timing_budget=1, min_timed_calls=5))
    assert result.status == "correct", result.message
    detail = next(check.detail for check in result.checks if check.name == "every_element_counts")
    assert "the reference refused 4 of the copies" in detail


def test_honest_kernels_that_rely_on_their_inputs_structure_pass():
    """A kernel may rely on what the problem's inputs always are (KernelBench 13-15: symmetric and
    triangular matrices): the copies keep that structure, so such a kernel follows the reference."""
    def symmetric(generator):
        a = torch.randn(512, 512, generator=generator)
        return [(a + a.T) / 2, torch.randn(512, 512, generator=generator)]

    def lower(generator):
        return [torch.tril(torch.randn(512, 512, generator=generator)),
                torch.tril(torch.randn(512, 512, generator=generator))]

    cases = [
        (symmetric, lambda a, b: a @ b, lambda a, b: a.mT @ b),  # reads A's transpose
        (lower, lambda a, b: torch.tril(a @ b), lambda a, b: torch.tril(torch.tril(a) @ torch.tril(b))),
    ]
    for make, reference, candidate in cases:
        close, finding = judge(reference, candidate, make)
        assert close and finding is None, finding

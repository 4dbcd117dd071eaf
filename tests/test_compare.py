"""The host-side comparison: full element-wise checks and the fingerprint bounds."""

import io
import re

import pytest
import torch

from kernelopt.sandbox import EvalOptions
from kernelopt.sandbox import compare
from kernelopt.sandbox.fingerprints import Fingerprinter

OPTIONS = EvalOptions()


def fingerprints(t: torch.Tensor, seed: int = 7):
    return [Fingerprinter(seed)(t)]


def meta(t: torch.Tensor):
    return [[list(t.shape), str(t.dtype), str(t.device)]]


def within_tolerance(ref: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """An output the full comparison accepts, errors pushed towards both bounds, random signs."""
    elementwise = OPTIONS.atol + OPTIONS.rtol * ref.abs()
    bound = torch.minimum(elementwise, 0.9 * OPTIONS.effective_max_rel_error() * ref.abs())
    scale = torch.rand(ref.shape, generator=generator, dtype=torch.float64) * 0.98
    sign = torch.randint(0, 2, ref.shape, generator=generator).to(torch.float64) * 2 - 1
    return (ref.double() + sign * scale * bound).to(ref.dtype)


def test_identical_outputs_pass():
    ref = torch.randn(1000)
    result = compare.compare_outputs([ref.clone()], [ref], OPTIONS)
    assert result.passed and result.max_abs_error == 0 and not result.reduced_precision


def test_zero_output_fails_where_the_reference_is_below_the_tolerance():
    ref = torch.tanh(torch.randn(4096)) * 1e-4
    zeros = torch.zeros_like(ref)
    assert torch.allclose(zeros, ref, atol=1e-2, rtol=1e-2)  # what a naive referee accepts
    result = compare.compare_outputs([zeros], [ref], OPTIONS)
    assert not result.passed and "does not follow the input" in result.message


@pytest.mark.parametrize("out, message", [
    (torch.zeros(10, 3), "shape"),
    (torch.zeros(10, 2, dtype=torch.float16), "dtype"),
])
def test_shape_and_dtype_must_match(out, message):
    result = compare.compare_outputs([out], [torch.zeros(10, 2)], OPTIONS)
    assert not result.passed and message in result.message


def test_nan_positions_must_match():
    ref = torch.tensor([1.0, float("nan"), 3.0])
    assert compare.compare_outputs([ref.clone()], [ref], OPTIONS).passed
    assert not compare.compare_outputs([torch.tensor([1.0, 2.0, 3.0])], [ref], OPTIONS).passed
    assert not compare.compare_outputs([torch.full((3,), float("nan"))], [ref], OPTIONS).passed


def test_integer_outputs_must_match_exactly():
    ref = torch.arange(100)
    off_by_one = ref.clone()
    off_by_one[5] += 1
    assert compare.compare_outputs([ref.clone()], [ref], OPTIONS).passed
    assert not compare.compare_outputs([off_by_one], [ref], OPTIONS).passed


def test_wrong_number_of_outputs():
    assert not compare.compare_outputs([torch.zeros(2)], [torch.zeros(2), torch.zeros(2)], OPTIONS).passed


def test_bfloat16_arithmetic_passes_the_tolerance_but_is_flagged():
    ref = torch.randn(512, 512)
    downgraded = ref.bfloat16().float()
    result = compare.compare_outputs([downgraded], [ref], OPTIONS)
    assert result.passed and result.reduced_precision


def test_float32_reordering_is_not_flagged():
    a, b = torch.randn(256, 512, dtype=torch.float64), torch.randn(512, 256, dtype=torch.float64)
    exact = (a @ b).float()
    reordered = (a.float() @ b.float())
    result = compare.compare_outputs([reordered], [exact], OPTIONS)
    assert result.passed and not result.reduced_precision


@pytest.mark.parametrize("seed", range(20))
def test_fingerprints_never_reject_an_output_the_full_comparison_accepts(seed):
    generator = torch.Generator().manual_seed(seed)
    shape = (int(torch.randint(1, 3000, (1,), generator=generator)),)
    scale = 10 ** float(torch.empty(1).uniform_(-3, 3, generator=generator))
    ref = torch.randn(shape, generator=generator) * scale
    out = within_tolerance(ref, generator)
    assert compare.compare_outputs([out], [ref], OPTIONS).passed
    assert compare.compare_fingerprints(fingerprints(out), fingerprints(ref), meta(ref), OPTIONS) is None


VALUE_CHANGING = [
    lambda r: torch.zeros_like(r),
    lambda r: torch.full_like(r, r.mean().item()),
    lambda r: r * 1.1,
    lambda r: torch.cat([r[: r.numel() // 2], torch.zeros(r.numel() - r.numel() // 2)]),
]
REARRANGING = [
    lambda r: r[torch.randperm(r.numel(), generator=torch.Generator().manual_seed(3))],
    lambda r: torch.roll(r, 1),
    lambda r: r + 0.05,
    lambda r: torch.randn(r.shape, generator=torch.Generator().manual_seed(9)),  # another input's output
]


def assert_caught(out, ref):
    assert not compare.compare_outputs([out], [ref], OPTIONS).passed
    assert compare.compare_fingerprints(fingerprints(out), fingerprints(ref), meta(ref), OPTIONS) is not None


@pytest.mark.parametrize("wrong", VALUE_CHANGING + REARRANGING)
def test_fingerprints_catch_wrong_outputs_of_ordinary_magnitude(wrong):
    ref = torch.randn(4096, generator=torch.Generator().manual_seed(1))
    assert_caught(wrong(ref), ref)


@pytest.mark.parametrize("wrong", VALUE_CHANGING)
def test_fingerprints_catch_value_changes_below_the_tolerance(wrong):
    # Rearrangements of an output far below atol pass the sums; the referee's sampled full
    # comparison of timed calls covers them (tests/adversarial).
    ref = torch.randn(4096, generator=torch.Generator().manual_seed(1)) * 1e-4
    assert_caught(wrong(ref), ref)


def test_fingerprints_of_integer_outputs_are_exact():
    ref = torch.randint(0, 100, (1000,))
    out = ref.clone()
    out[0] = out[0] + 1
    assert compare.compare_fingerprints(fingerprints(ref), fingerprints(ref), meta(ref), OPTIONS) is None
    assert compare.compare_fingerprints(fingerprints(out), fingerprints(ref), meta(ref), OPTIONS) is not None


def test_fingerprints_count_non_finite_values():
    ref = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert compare.compare_fingerprints(fingerprints(ref), fingerprints(ref), meta(ref), OPTIONS) is None
    finite = torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert compare.compare_fingerprints(fingerprints(finite), fingerprints(ref), meta(ref), OPTIONS) is not None


class NotATensor:
    pass


def test_blobs_must_hold_plain_tensors_and_cannot_run_code():
    good = io.BytesIO()
    torch.save([torch.ones(3)], good)
    assert torch.equal(compare.load_tensors(good.getvalue())[0], torch.ones(3))
    for payload in ([NotATensor()], {"a": torch.ones(1)}, torch.ones(2)):
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        with pytest.raises(compare.BadOutputBlob):
            compare.load_tensors(buffer.getvalue())
    with pytest.raises(compare.BadOutputBlob):
        compare.load_tensors(b"garbage")


def test_a_difference_in_the_last_step_of_a_large_output_is_found():
    """The full comparison works through the output in steps; none is skipped."""
    ref = torch.randn(3 * compare._STEP + 5)
    out = ref.clone()
    out[-1] += 1.0
    result = compare.compare_outputs([out], [ref], OPTIONS)
    assert not result.passed and result.mismatch_fraction == 1 / ref.numel()
    assert result.max_abs_error == pytest.approx(1.0, rel=1e-6)


def test_error_statistics_match_a_whole_tensor_computation():
    generator = torch.Generator().manual_seed(3)
    ref = torch.randn(2 * compare._STEP + 123, generator=generator)
    out = ref + 1e-4 * torch.randn(ref.shape, generator=generator)
    result = compare.compare_outputs([out], [ref], OPTIONS)
    o, r = out.double(), ref.double()
    assert result.passed
    # float32 outputs are compared in float32 with float64 sums: statistics to float32 rounding
    assert result.max_abs_error == pytest.approx((o - r).abs().max().item(), rel=1e-6)
    assert result.max_rel_error == pytest.approx(((o - r).abs() / r.abs()).max().item(), rel=1e-6)
    assert result.rel_l2_error == pytest.approx(
        (torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r)).item(), rel=1e-6)


def float64_verdict(out: torch.Tensor, ref: torch.Tensor) -> tuple[int, int]:
    """(elements outside, NaN mismatches) as float64 isclose over the whole tensor decides."""
    o, r = out.double(), ref.double()
    outside = int((~torch.isclose(o, r, rtol=OPTIONS.rtol, atol=OPTIONS.atol, equal_nan=True)).sum())
    return outside, int((torch.isnan(o) != torch.isnan(r)).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_elements_at_the_tolerance_edge_are_decided_as_float64_decides(dtype):
    """The fast path works in the output's precision; rounding must not move an element across
    its tolerance, in either direction."""
    generator = torch.Generator().manual_seed(5)
    ref = (torch.randn(2 * compare._STEP + 7, generator=generator) * 10).to(dtype)
    tolerance = OPTIONS.atol + OPTIONS.rtol * ref.double().abs()
    # errors within a few ulps of the tolerance on both sides, random signs
    factor = 1.0 + (torch.rand(ref.shape, generator=generator, dtype=torch.float64) - 0.5) * 1e-6
    sign = torch.randint(0, 2, ref.shape, generator=generator).double() * 2 - 1
    out = (ref.double() + sign * tolerance * factor).to(dtype)
    expected_outside, _ = float64_verdict(out, ref)
    assert 0 < expected_outside < ref.numel()  # the edge really is straddled
    result = compare.compare_tensor(out, ref, OPTIONS)
    assert result.mismatch_fraction == expected_outside / ref.numel()


def test_steps_with_nan_infinities_or_huge_values_take_the_exact_path():
    ref = torch.randn(4 * compare._STEP)
    out = ref.clone()
    ref[10] = out[10] = float("nan")                        # both NaN: close
    ref[compare._STEP + 3] = out[compare._STEP + 3] = float("inf")  # equal infinities: close
    ref[2 * compare._STEP + 1] = out[2 * compare._STEP + 1] = 3e30  # squares overflow float32
    out[2 * compare._STEP + 2] += 1e-3
    out[3 * compare._STEP + 9] = float("nan")               # NaN only in the output
    result = compare.compare_tensor(out, ref, OPTIONS)
    assert not result.passed and "NaN at 1 position" in result.message
    out[3 * compare._STEP + 9] = ref[3 * compare._STEP + 9]
    result = compare.compare_tensor(out, ref, OPTIONS)
    assert result.passed and result.mismatch_fraction == 0.0
    assert result.max_abs_error == pytest.approx(1e-3, rel=1e-3)
    finite = torch.isfinite(ref)
    r = ref.double()[finite]
    assert result.rel_l2_error == pytest.approx(1e-3 / torch.linalg.vector_norm(r).item(), rel=1e-3)


# -- input dependence -------------------------------------------------------------------------

def squared_mean(n: int):
    """A degenerate output: the mean of x^2 over n standard normals (1 +- sqrt(2 / n))."""
    def make(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, generator=generator)
        return x, torch.mean(x * x)
    return make


def dependence(candidate, trials: int, make=squared_mean(1 << 19), seed: int = 0, options=OPTIONS):
    """Run `trials` correctness trials through an InputDependence; every candidate output must
    pass the full comparison first (as in the referee). Returns the verdict."""
    generator = torch.Generator().manual_seed(seed)
    tracker = compare.InputDependence(options)
    for _ in range(trials):
        x, ref = make(generator)
        out = candidate(x, ref)
        assert compare.compare_outputs([out], [ref], options).passed, "the case must pass today's comparison"
        tracker.add([out], [ref])
    return tracker.verdict()


@pytest.mark.parametrize("trials", [2, 3, 5, 10])
@pytest.mark.parametrize("seed", range(5))
def test_a_constant_fails_where_the_output_barely_moves(trials, seed):
    message = dependence(lambda x, ref: torch.tensor(1.0), trials, seed=seed)
    assert message and "does not depend on the input" in message
    # the two numbers: how far the reference moves, and the candidate's error
    movement = float(re.search(r"move by ([0-9.e+-]+) RMS", message)[1])
    error = float(re.search(r"candidate's error is ([0-9.e+-]+) RMS", message)[1])
    assert error > compare.INPUT_DEPENDENCE_RATIO * movement > 0


@pytest.mark.parametrize("trials", [2, 5])
def test_even_the_best_constant_fails(trials):
    """The mean of the very references it is judged against (hindsight no candidate has): any
    output that is the same for every input errs by at least sqrt((T-1)/4T) of the movement."""
    generator = torch.Generator().manual_seed(11)
    refs = [squared_mean(1 << 19)(generator)[1] for _ in range(trials)]
    best = torch.stack(refs).mean()
    tracker = compare.InputDependence(OPTIONS)
    for ref in refs:
        assert compare.compare_outputs([best], [ref], OPTIONS).passed
        tracker.add([best], [ref])
    assert tracker.verdict() is not None


def test_one_trial_decides_nothing():
    assert dependence(lambda x, ref: torch.tensor(1.0), 1) is None


@pytest.mark.parametrize("seed", range(5))
def test_honest_float32_code_passes(seed):
    exact = lambda x, ref: torch.dot(x.double(), x.double()).div(x.numel()).float()  # noqa: E731
    chunked = lambda x, ref: sum(c.square().sum() for c in x.split(1000)) / x.numel()  # noqa: E731
    sequential = lambda x, ref: torch.cumsum(x * x, 0)[-1] / x.numel()  # noqa: E731
    for candidate in (exact, chunked, sequential):
        assert dependence(candidate, 5, seed=seed) is None


def test_an_estimate_from_a_subsample_fails():
    half = lambda x, ref: torch.mean(x[: x.numel() // 2] ** 2)  # noqa: E731
    message = dependence(half, 5)
    assert message and "does not depend on the input" in message
    # three quarters of the work leave an error of 0.4 of the movement: still too much
    most = lambda x, ref: torch.mean(x[: x.numel() * 3 // 4] ** 2)  # noqa: E731
    assert dependence(most, 5) is not None


def test_outputs_that_move_more_than_the_tolerance_are_left_to_allclose():
    """Where allclose itself rejects constants, an error anywhere inside the tolerance passes."""
    def make(generator):
        x = torch.randn(4096, generator=generator)
        return x, torch.relu(x)
    within = lambda x, ref: ref + 0.005 * torch.sign(torch.randn(ref.shape))  # noqa: E731
    assert dependence(within, 5, make=make) is None


def test_movement_at_the_level_of_rounding_is_not_judged():
    """Softmax row sums are 1 up to rounding for every input: returning ones is correct."""
    def make(generator):
        x = torch.randn(64, 2048, generator=generator)
        return x, torch.softmax(x, dim=-1).sum(dim=-1)
    assert dependence(lambda x, ref: torch.ones(64), 5, make=make) is None


def test_an_output_independent_of_the_input_is_not_judged():
    def make(generator):
        x = torch.randn(100, generator=generator)
        return x, torch.full((10,), 3.0)
    assert dependence(lambda x, ref: torch.full((10,), 3.0), 3, make=make) is None


def test_integer_and_empty_outputs_are_skipped():
    tracker = compare.InputDependence(OPTIONS)
    for value in (1, 2, 3):
        tracker.add([torch.tensor([value]), torch.zeros(0)], [torch.tensor([value]), torch.zeros(0)])
    assert tracker.verdict() is None


def test_a_degenerate_part_of_a_larger_output_is_judged_on_its_own():
    """A loss returned beside a large output: the large part's movement must not hide it."""
    def make(generator):
        x = torch.randn(16, 1 << 18, generator=generator)
        return x, torch.cat([torch.relu(x[0, :4096]), (x * x).mean(dim=1)])
    honest = lambda x, ref: torch.cat([torch.relu(x[0, :4096]), (x * x).sum(dim=1) / x.shape[1]])  # noqa: E731
    assert dependence(honest, 5, make=make) is None
    hack = lambda x, ref: torch.cat([torch.relu(x[0, :4096]), torch.ones(16)])  # noqa: E731
    message = dependence(hack, 5, make=make)
    assert message and "does not depend on the input" in message and "parts" in message


def test_outputs_are_named_when_there_are_several():
    generator = torch.Generator().manual_seed(2)
    tracker = compare.InputDependence(OPTIONS)
    for _ in range(3):
        x = torch.randn(1 << 19, generator=generator)
        tracker.add([x.clone(), torch.tensor(1.0)], [x, torch.mean(x * x)])
    message = tracker.verdict()
    assert message and message.startswith("output 1 ")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.complex64])
def test_other_dtypes(dtype):
    def make(generator):
        x = torch.randn(1 << 19, generator=generator, dtype=torch.float64)
        value = torch.mean(x * x)
        if dtype.is_complex:
            return x, torch.complex(value, -value).to(dtype)
        return x, value.to(dtype)
    honest = lambda x, ref: ref.clone()  # noqa: E731
    assert dependence(honest, 5, make=make) is None
    one = torch.ones((), dtype=torch.float64).to(dtype)
    constant = lambda x, ref: one * (1 - 1j if dtype.is_complex else 1)  # noqa: E731
    verdict = dependence(constant, 5, make=make)
    if dtype in (torch.float16, torch.bfloat16):
        # a movement of ~0.5 % is a few ulps of a 16-bit float: rounding, not judged
        assert verdict is None
    else:
        assert verdict is not None


def test_nan_and_infinities_count_as_neither_error_nor_movement():
    def make(generator):
        x = torch.randn(1 << 19, generator=generator)
        value = torch.mean(x * x)
        return x, torch.stack([value, torch.tensor(float("nan")), torch.tensor(float("inf")), value * 2])
    honest = lambda x, ref: ref.clone()  # noqa: E731
    assert dependence(honest, 4, make=make) is None
    constant = lambda x, ref: torch.tensor([1.0, float("nan"), float("inf"), 2.0])  # noqa: E731
    assert dependence(constant, 4, make=make) is not None


@pytest.mark.parametrize("step", [compare._STEP, 64, 1000])
def test_dependence_sums_match_a_whole_tensor_computation(monkeypatch, step):
    """Blocks of a few elements per step, and blocks larger than a step (cut across steps)."""
    monkeypatch.setattr(compare, "_STEP", step)
    generator = torch.Generator().manual_seed(4)
    numel = 1024 * 97 + 13
    refs = [torch.randn(numel, generator=generator) for _ in range(3)]
    outs = [r + 1e-3 * torch.randn(numel, generator=generator) for r in refs]
    tracker = compare.InputDependence(OPTIONS)
    for out, ref in zip(outs, refs):
        tracker.add([out], [ref])
    sums = tracker._parts[0]
    size = sums.size
    assert sums.count * size >= numel > (sums.count - 1) * size

    def blockwise(values: torch.Tensor) -> torch.Tensor:
        padded = torch.nn.functional.pad(values.double(), (0, sums.count * size - numel))
        return padded.view(sums.count, size).sum(dim=1)

    expected = torch.stack([
        sum(blockwise((o.double() - r.double()) ** 2) for o, r in zip(outs, refs)),
        sum(blockwise((b.double() - a.double()) ** 2) for a, b in zip(refs, refs[1:])),
        sum(blockwise(r.double() ** 2) for r in refs),
        sum(blockwise((OPTIONS.atol + OPTIONS.rtol * r.double().abs()) ** 2) for r in refs),
    ])
    torch.testing.assert_close(sums.sums, expected, rtol=1e-5, atol=1e-9)


def test_degenerate_depends_on_the_reference_alone():
    """Whether the timed calls are judged for input dependence too (timing.rounds): yes where a
    part of the reference's output barely moves, no where it moves a lot, whatever the candidate
    answered; nothing is known before a second trial."""
    generator = torch.Generator().manual_seed(3)
    loss, moving = compare.InputDependence(OPTIONS), compare.InputDependence(OPTIONS)
    for trial in range(3):
        _, ref = squared_mean(1 << 19)(generator)
        spread = torch.randn(4096, generator=generator)
        loss.add([torch.tensor(1.0) if trial else ref.clone()], [ref])
        moving.add([spread.clone()], [spread])
        if trial == 0:
            assert not loss.degenerate() and not moving.degenerate()
    assert loss.degenerate() and loss.verdict() is not None
    assert not moving.degenerate() and moving.verdict() is None

"""The host-side comparison: full element-wise checks and the fingerprint bounds."""

import io

import pytest
import torch

from kernelopt.sandbox import EvalOptions
from kernelopt.sandbox import compare
from kernelopt.sandbox.worker.measure import Fingerprinter

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

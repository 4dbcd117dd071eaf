"""The comparison of candidate outputs against reference outputs, done in the host process.

Two levels:
- full comparison (correctness trials): every element, `allclose(atol, rtol)` as KernelBench
  does, plus a magnitude-aware bound on ||out - ref|| / ||ref|| so that an output which ignores
  its input (zeros, a constant) cannot pass where the reference output is below the tolerance;
- fingerprint comparison (every timed call): sums the worker computed over each output, checked
  against bounds that any output passing the full comparison is guaranteed to meet.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
from dataclasses import dataclass

import torch

from kernelopt.sandbox.results import EvalOptions, TrialResult

# Relative L2 error above this on a float32/float64 reference means the candidate computed in
# lower precision (fp16/bf16/TF32 arithmetic show ~1e-4 to 1e-2; fp32 reordering ~1e-6).
REDUCED_PRECISION_REL_L2 = 1e-4
# Elements per step of the host's passes over outputs (the full comparison, the input-dependence
# and response sums): torch's intra-op grain size, so an operation on one row of a step runs on
# this one thread, and a step's float64 temporaries stay in cache. Whole-tensor operations on two
# threads waited for the second thread whenever the host's other work (a worker starting, a
# compile) held a core: 1M elements took 200-400 ms instead of 60 ms. Over 16.7M float32 elements
# on the 2-core VM, 32K-element steps took 0.65x-0.9x the time of 16K ones, quiet and with a core
# busy; 64K ones were faster still when quiet, but slower now and then with a core busy
# (benchmarks/host_passes.py; benchmarks/results/throughput-cpu-2026-11-29b).
_STEP = 1 << 15
# On a device (the keeper's comparison of timed outputs, sandbox/keeper.py) each step costs a few
# kernel launches and a wait for their sums: whole outputs of up to this many elements at once.
_DEVICE_STEP = 1 << 24
# The fast path's limits: values up to this magnitude square without overflow in float32, and
# working-precision rounding of |out - ref| and of the tolerance is far below this fraction.
_FAST_PATH_LIMIT = 1e15
_ROUNDING_BAND = 1e-5


class BadOutputBlob(ValueError):
    """A worker sent something that is not a list of plain tensors."""


def load_tensors(blob: bytes) -> list[torch.Tensor]:
    """Deserialize a worker's outputs safely: weights_only refuses arbitrary pickled objects."""
    try:
        value = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - any failure means the blob is unusable
        raise BadOutputBlob(f"unreadable output blob: {type(exc).__name__}: {exc}") from None
    if type(value) is not list or not all(type(t) is torch.Tensor for t in value):
        raise BadOutputBlob("output blob is not a list of plain tensors")
    return value


@dataclass(frozen=True)
class Tolerances:
    """What a comparison needs of the evaluation's settings; plain numbers, so that the keeper,
    which compares timed outputs on the device, is told them in a frame (`of` / `to_json`)."""

    atol: float
    rtol: float
    max_rel_error: float

    @classmethod
    def of(cls, options: EvalOptions) -> Tolerances:
        return cls(options.atol, options.rtol, options.effective_max_rel_error())

    def effective_max_rel_error(self) -> float:
        return self.max_rel_error

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Comparison:
    passed: bool
    message: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    rel_l2_error: float | None = None
    mismatch_fraction: float | None = None
    reduced_precision: bool = False


def compare_outputs(candidate: list[torch.Tensor], reference: list[torch.Tensor],
                    options: EvalOptions | Tolerances) -> Comparison:
    if len(candidate) != len(reference):
        return Comparison(False, f"returned {len(candidate)} tensor(s), expected {len(reference)}")
    worst = Comparison(True, "")
    for index, (out, ref) in enumerate(zip(candidate, reference)):
        result = compare_tensor(out, ref, options)
        label = f"output {index}: " if len(reference) > 1 else ""
        if not result.passed:
            result.message = label + result.message
            return result
        worst = _worse(worst, result)
    return worst


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, options: EvalOptions | Tolerances) -> Comparison:
    if out.shape != ref.shape:
        return Comparison(False, f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype {out.dtype} != expected {ref.dtype}")
    if ref.numel() == 0:
        return Comparison(True, "", 0.0, 0.0, 0.0, 0.0)
    if not (ref.is_floating_point() or ref.is_complex()):
        mismatches = (out != ref).sum().item()
        fraction = mismatches / ref.numel()
        ok = mismatches == 0
        return Comparison(ok, "" if ok else f"{mismatches} of {ref.numel()} values differ (exact dtype)",
                          mismatch_fraction=fraction)
    sums = _error_sums(out, ref, options)
    if sums.nan_mismatches:
        return Comparison(False, f"NaN at {sums.nan_mismatches} position(s) where the reference has none (or vice versa)")
    max_abs, max_rel = sums.max_abs, sums.max_rel
    ref_norm, diff_norm = math.sqrt(sums.ref_squares), math.sqrt(sums.diff_squares)
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    mismatch = sums.outside / sums.count
    measured = functools.partial(Comparison, max_abs_error=max_abs, max_rel_error=max_rel, rel_l2_error=rel_l2,
                                 mismatch_fraction=mismatch)  # a Comparison with these statistics
    if mismatch > 0:
        return measured(False, f"{mismatch:.2%} of values outside atol={options.atol}, rtol={options.rtol} "
                               f"(max abs error {max_abs:.3g})")
    bound = options.effective_max_rel_error()
    if rel_l2 > bound:
        return measured(False, f"relative L2 error {rel_l2:.3g} exceeds {bound:g} although every element "
                               f"is within atol (reference magnitude {ref_norm / math.sqrt(ref.numel()):.3g} RMS "
                               f"is below the tolerance): the output does not follow the input")
    reduced = ref.dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128) and \
        rel_l2 > REDUCED_PRECISION_REL_L2
    return measured(True, "", reduced_precision=reduced)


@dataclass
class _ErrorSums:
    """What the full comparison needs, accumulated step by step in float64."""

    count: int = 0
    nan_mismatches: int = 0  # positions where exactly one side is NaN
    outside: int = 0  # positions where isclose(out, ref, atol, rtol, equal_nan) is false
    max_abs: float = 0.0  # over positions where both are finite, as the two below
    max_rel: float = 0.0
    ref_squares: float = 0.0
    diff_squares: float = 0.0


def _error_sums(out: torch.Tensor, ref: torch.Tensor, options: EvalOptions | Tolerances) -> _ErrorSums:
    o_all, r_all = _flat(out), _flat(ref)
    sums = _ErrorSums(count=r_all.numel())
    # float32 arithmetic (float64 for float64 outputs) with float64 sums: a fifth of the time of
    # doing every step in float64, which took a minute per trial on KernelBench's larger outputs.
    work = torch.float64 if r_all.dtype == torch.float64 else torch.float32
    step = _STEP if r_all.device.type == "cpu" else _DEVICE_STEP
    for start in range(0, sums.count, step):
        o = o_all[start:start + step].to(work)
        r = r_all[start:start + step].to(work)
        if not _add_finite_step(sums, o, r, options):
            _add_exact_step(sums, o.to(torch.float64), r.to(torch.float64), options)
    return sums


def _add_finite_step(sums: _ErrorSums, o: torch.Tensor, r: torch.Tensor, options: EvalOptions | Tolerances) -> bool:
    """The common case, every value finite and of ordinary magnitude, in the working precision.
    Returns False (having added nothing) when the step needs the exact path."""
    diff = (o - r).abs_()
    r_abs = r.abs()
    max_abs, max_ref = diff.max().item(), r_abs.max().item()
    if not max(max_abs, max_ref) <= _FAST_PATH_LIMIT:  # NaN, an infinity, or squares that could overflow
        return False
    # Rounding decides nothing: an element within a hair of its tolerance is checked again in
    # float64, so `outside` counts exactly what float64 isclose rejects.
    shrink = 1.0 - _ROUNDING_BAND
    near = diff > r_abs * (options.rtol * shrink) + options.atol * shrink
    if near.any():
        exact = torch.isclose(o[near].to(torch.float64), r[near].to(torch.float64), rtol=options.rtol,
                              atol=options.atol, equal_nan=True)
        sums.outside += int((~exact).sum())
    sums.max_abs = max(sums.max_abs, max_abs)
    sums.max_rel = max(sums.max_rel, (diff / r_abs.clamp_min_(1e-30)).max().item())
    sums.ref_squares += torch.sum(r * r, dtype=torch.float64).item()
    sums.diff_squares += torch.sum(diff * diff, dtype=torch.float64).item()
    return True


def _add_exact_step(sums: _ErrorSums, o: torch.Tensor, r: torch.Tensor, options: EvalOptions | Tolerances) -> None:
    """Any step, in float64, with NaN and infinities handled as isclose(equal_nan=True) does."""
    sums.nan_mismatches += int((torch.isnan(o) != torch.isnan(r)).sum())
    close = torch.isclose(o, r, rtol=options.rtol, atol=options.atol, equal_nan=True)
    sums.outside += int((~close).sum())
    finite = torch.isfinite(r) & torch.isfinite(o)
    diff = torch.where(finite, (o - r).abs(), 0.0)
    rel = torch.where(finite, diff / r.abs().clamp_min(1e-30), 0.0)
    sums.max_abs = max(sums.max_abs, diff.max().item())
    sums.max_rel = max(sums.max_rel, rel.max().item())
    sums.ref_squares += torch.where(finite, r, 0.0).square().sum().item()
    sums.diff_squares += diff.square().sum().item()


def _flat(t: torch.Tensor) -> torch.Tensor:
    return (torch.view_as_real(t) if t.is_complex() else t).reshape(-1)


def _worse(a: Comparison, b: Comparison) -> Comparison:
    def key(c: Comparison) -> float:
        return c.rel_l2_error or 0.0
    worse = b if key(b) >= key(a) else a
    worse.reduced_precision = a.reduced_precision or b.reduced_precision
    return worse


def trial_result(index: int, seed: int, comparison: Comparison) -> TrialResult:
    return TrialResult(index=index, seed=seed, passed=comparison.passed, message=comparison.message,
                       max_abs_error=comparison.max_abs_error, max_rel_error=comparison.max_rel_error,
                       rel_l2_error=comparison.rel_l2_error, mismatch_fraction=comparison.mismatch_fraction)


# -- fingerprints ----------------------------------------------------------------------------

def compare_fingerprints(candidate: list, reference: list, reference_meta: list[list],
                         options: EvalOptions) -> str | None:
    """None when the candidate's fingerprints are consistent with the reference's, else why not.

    For an output c with |c_i - r_i| <= atol + rtol |r_i| for every i (what allclose accepts),
    over the whole output and over every block B of it:
      |sum_B c - sum_B r|, ||c|_1,B - |r|_1,B|, |sum w c - sum w r|  <=  n_B atol + rtol |r|_1,B
      | ||c||_2 - ||r||_2 |  <=  sqrt(n) atol + rtol ||r||_2,
    and the relative L2 bound of the full comparison gives | ||c||_2 - ||r||_2 | <= b ||r||_2.
    So an output the full comparison accepts always passes. Integer and boolean outputs must
    match exactly. `reference_meta` is [shape, dtype, device] per output.
    """
    if len(candidate) != len(reference):
        return f"returned {len(candidate)} tensor(s), expected {len(reference)}"
    for index, (c, r, meta) in enumerate(zip(candidate, reference, reference_meta)):
        if not _well_formed(c, r):
            return f"output {index}: malformed fingerprint"
        problem = _compare_one(c, r, math.prod(meta[0]), _is_floating(meta[1]), options)
        if problem:
            return f"output {index}: {problem}"
    return None


def _well_formed(c, r) -> bool:
    if not isinstance(c, dict):
        return False
    for key in ("sums", "blocks", "block_abs"):
        values = c.get(key)
        if not isinstance(values, list) or len(values) != len(r[key]):
            return False
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return False
    return True


def _compare_one(c: dict, r: dict, n: int, floating: bool, options: EvalOptions) -> str | None:
    if not floating:
        return None if c == r else "values differ from the reference's (exact dtype)"
    c_sum, c_abs, c_sq, c_w, *c_special = c["sums"]
    r_sum, r_abs, r_sq, r_w, *r_special = r["sums"]
    if [int(v) for v in c_special] != [int(v) for v in r_special]:
        return f"NaN/inf counts {c_special} differ from the reference's {r_special}"
    slack = 1e-9 * (r_abs + 1.0)
    bound = n * options.atol + options.rtol * r_abs + slack
    for label, cv, rv in (("sum", c_sum, r_sum), ("abs-sum", c_abs, r_abs), ("weighted sum", c_w, r_w)):
        if not abs(cv - rv) <= bound:
            return f"{label} {cv:.6g} differs from the reference's {rv:.6g}"
    c_norm, r_norm = math.sqrt(max(c_sq, 0.0)), math.sqrt(max(r_sq, 0.0))
    norm_bound = min(math.sqrt(n) * options.atol + options.rtol * r_norm,
                     options.effective_max_rel_error() * r_norm) + slack
    if not abs(c_norm - r_norm) <= norm_bound:
        return f"L2 norm {c_norm:.6g} differs from the reference's {r_norm:.6g}"
    block_size = -(-n // max(len(r["blocks"]), 1))
    for b, (cb, rb, cab, rab) in enumerate(zip(c["blocks"], r["blocks"], c["block_abs"], r["block_abs"])):
        block_bound = block_size * options.atol + options.rtol * rab + 1e-9 * (rab + 1.0)
        if not (abs(cb - rb) <= block_bound and abs(cab - rab) <= block_bound):
            return f"block {b} sums ({cb:.6g}, |{cab:.6g}|) differ from the reference's ({rb:.6g}, |{rab:.6g}|)"
    return None


def _is_floating(dtype_name: str) -> bool:
    return any(word in dtype_name for word in ("float", "complex", "half", "bfloat"))


# -- input dependence ------------------------------------------------------------------------
#
# Where an output barely moves between input sets (a loss, or a mean over many random values),
# a constant lies within the tolerance of every answer, so allclose and the relative-L2 bound
# both accept it. What still tells a computed answer from a guessed one is whether its error is
# small against how far the answer moves when the input changes.

# An output part whose values move between input sets by at most this many tolerance bands (RMS
# of atol + rtol |ref|) is degenerate: the best constant, whose RMS error is the movement / sqrt 2,
# has a fair chance of passing allclose on every trial. Beyond it allclose nearly always rejects them.
DEGENERATE_SPREAD = 2.0
# On a degenerate part the candidate's RMS error must be at most this fraction of the RMS
# movement between consecutive trials. An output that is the same for every input errs by at
# least sqrt((T - 1) / 4T) >= 0.35 of it over T >= 2 trials (triangle inequality), so any
# constant fails whatever its value; an estimate from a fraction f of i.i.d. terms has an expected
# ratio of sqrt((1 - f) / 2f), so subsampling must keep 97 % of the work to pass. (At 0.25 an
# estimate from a quarter of a loss's terms, an error 1.2 times the movement, still passed five
# trials once in 500; at 0.125 about once in 10^4.)
INPUT_DEPENDENCE_RATIO = 0.125
# Honest code's RMS error relative to the output's RMS: float32 code that reorders reductions
# or fuses operations stays within ~1e-7 to 1e-5 (REDUCED_PRECISION_REL_L2 is ten times this);
# outputs of a 16-bit dtype differ by an ulp or two (`honest_relative_error`).
HONEST_REL_ERROR = 1e-5
# A part whose movement is at most this many honest errors is not judged: there honest code
# could not be told from a constant (and softmax row sums, a normalized vector's norm, move
# only by rounding). Where a part is judged, honest code's error is under 1/NOISE_SPREAD of the
# movement, half of INPUT_DEPENDENCE_RATIO. For float32 outputs: a movement of 1.6e-4 of the
# output's RMS, e.g. a mean of squares of up to ~1.5e8 standard normals per output element.
NOISE_SPREAD = 16.0
# Outputs are judged in up to this many contiguous parts, so that a degenerate part (a loss
# returned beside a large tensor, a reduced row) cannot hide behind the rest of the output.
DEPENDENCE_BLOCKS = 1024


def rounding_relative_error(dtype: torch.dtype) -> float:
    """Two ulps of the output dtype, relative: what rounding alone moves an output by."""
    if dtype.is_complex:
        dtype = torch.empty(0, dtype=dtype).real.dtype
    return 2 * torch.finfo(dtype).eps


def honest_relative_error(dtype: torch.dtype) -> float:
    """The RMS error, relative to the output's RMS, that honest code of this output dtype may have."""
    return max(HONEST_REL_ERROR, rounding_relative_error(dtype))


class InputDependence:
    """Whether a candidate's outputs follow the input where the reference's barely move.

    Fed one correctness trial at a time (outputs that already passed `compare_outputs`), it
    keeps, per output and per contiguous part of it, float64 sums of the candidate's squared
    error, of the reference's squared change from the previous trial, of the squared reference
    and of the squared tolerance band. `verdict()` then checks every part whose movement between
    input sets is within DEGENERATE_SPREAD tolerance bands and above rounding noise: the
    candidate's RMS error there must be at most INPUT_DEPENDENCE_RATIO times the RMS movement.
    Integer and boolean outputs are exact and skipped; so is everything before a second trial.
    Only the previous trial's reference tensors are held (references, not copies).
    """

    def __init__(self, options: EvalOptions):
        self.options = options
        self.trials = 0
        self._parts: list[_DependenceSums | None] = []
        self._previous: list[torch.Tensor] = []

    def add(self, candidate: list[torch.Tensor], reference: list[torch.Tensor]) -> None:
        if len(candidate) != len(reference):
            raise ValueError(f"{len(candidate)} candidate output(s) for {len(reference)} reference output(s)")
        if self.trials == 0:
            self._parts = [_DependenceSums.of(ref) for ref in reference]
        elif len(reference) != len(self._parts):
            raise ValueError("the reference returned a different number of outputs than in an earlier trial")
        for index, (out, ref) in enumerate(zip(candidate, reference)):
            sums = self._parts[index]
            if sums is None:
                continue
            if out.shape != ref.shape or ref.shape != sums.shape or ref.dtype != sums.dtype:
                self._parts[index] = None  # shapes that change with the input: not judged here
                continue
            sums.add(out, ref, self._previous[index] if self.trials else None, self.options)
        self._previous = list(reference)
        self.trials += 1

    def degenerate(self) -> bool:
        """Whether some part of the outputs is judged (it moves within DEGENERATE_SPREAD bands and
        above rounding noise): decided by the reference's outputs alone, so it tells whether the
        test can fail on this problem whatever the candidate does."""
        if self.trials < 2:
            return False
        return any(sums is not None and bool(sums.checked(self.trials).any()) for sums in self._parts)

    def verdict(self) -> str | None:
        """None, or why the candidate's output does not follow the input."""
        if self.trials < 2:
            return None
        for index, sums in enumerate(self._parts):
            problem = sums.failure(self.trials) if sums is not None else None
            if problem:
                label = f"output {index} " if len(self._parts) > 1 else "the output "
                return label + problem
        return None


class _DependenceSums:
    """Per-part float64 sums of one output over the trials (see InputDependence)."""

    _ERROR, _SPREAD, _REF, _TOL = range(4)

    def __init__(self, ref: torch.Tensor):
        self.shape, self.dtype = ref.shape, ref.dtype
        self.numel = _flat(ref).numel()
        count = min(DEPENDENCE_BLOCKS, self.numel)
        self.size = -(-self.numel // count)
        self.count = -(-self.numel // self.size)
        self.sizes = torch.full((self.count,), float(self.size), dtype=torch.float64)
        self.sizes[-1] = self.numel - (self.count - 1) * self.size
        self.sums = torch.zeros(4, self.count, dtype=torch.float64)
        self.honest = honest_relative_error(ref.dtype)

    @classmethod
    def of(cls, ref: torch.Tensor) -> _DependenceSums | None:
        if not (ref.is_floating_point() or ref.is_complex()) or ref.numel() == 0:
            return None
        return cls(ref)

    def add(self, out: torch.Tensor, ref: torch.Tensor, previous: torch.Tensor | None,
            options: EvalOptions) -> None:
        o_all, r_all = _flat(out), _flat(ref)
        p_all = _flat(previous) if previous is not None else None
        work = torch.float64 if r_all.dtype == torch.float64 else torch.float32
        for start, end, block in part_steps(self.numel, self.size):
            o, r = o_all[start:end].to(work), r_all[start:end].to(work)
            p = p_all[start:end].to(work) if p_all is not None else None
            values = _dependence_terms(o, r, p, options)
            if values is None:  # NaN, an infinity, or squares that could overflow
                values = _dependence_terms_exact(o.double(), r.double(),
                                                 p.double() if p is not None else None, options)
            add_to_parts(self.sums, values, block, self.size)

    def checked(self, trials: int) -> torch.Tensor:
        """Which parts are judged: those whose movement is within the degenerate bound and above noise."""
        spread = self.sums[self._SPREAD] / ((trials - 1) * self.sizes)
        ref = self.sums[self._REF] / (trials * self.sizes)
        band = self.sums[self._TOL] / (trials * self.sizes)
        return (spread > (NOISE_SPREAD * self.honest) ** 2 * ref) & (spread <= DEGENERATE_SPREAD ** 2 * band)

    def failure(self, trials: int) -> str | None:
        error = self.sums[self._ERROR] / (trials * self.sizes)
        spread = self.sums[self._SPREAD] / ((trials - 1) * self.sizes)
        band = self.sums[self._TOL] / (trials * self.sizes)
        failing = self.checked(trials) & (error > INPUT_DEPENDENCE_RATIO ** 2 * spread)
        if not bool(failing.any()):
            return None
        weights = self.sizes[failing]
        rms = {name: math.sqrt(float((values[failing] * weights).sum() / weights.sum()))
               for name, values in (("error", error), ("spread", spread), ("band", band))}
        where = "" if self.count == 1 else \
            f" (in {int(failing.sum())} of its {self.count} parts of {self.size} element(s))"
        return (f"does not depend on the input{where}: over {trials} input sets the reference's values move "
                f"by {rms['spread']:.3g} RMS from one input set to the next, within {DEGENERATE_SPREAD:g}x the "
                f"tolerance band ({rms['band']:.3g} RMS), so a constant answer would pass allclose; the "
                f"candidate's error is {rms['error']:.3g} RMS, more than {INPUT_DEPENDENCE_RATIO:g}x that "
                f"movement")


def part_steps(numel: int, size: int):
    """(start, end, first part) of the steps of one pass over a flat tensor cut into contiguous
    parts of `size` elements: whole parts per step when parts are small, pieces of one part
    otherwise. Steps of about _STEP elements keep a pass's temporaries in the cache."""
    if size <= _STEP:
        per = (_STEP // size) * size
        for start in range(0, numel, per):
            yield start, min(numel, start + per), start // size
        return
    start = 0
    while start < numel:
        block = start // size
        end = min(numel, start + _STEP, (block + 1) * size)
        yield start, end, block
        start = end


def add_to_parts(sums: torch.Tensor, values: torch.Tensor, first: int, size: int) -> None:
    """Add a step's per-element rows (`values`, rows x elements, from part_steps' step starting at
    part `first`) to the float64 per-part sums `sums` (rows x parts)."""
    # Converted first: a reduction over one dimension given dtype=float64 took a thousand times as long.
    values = values.to(torch.float64)
    length = values.shape[1]
    if size > _STEP:  # a piece of one part
        sums[:, first] += values.sum(dim=1)
        return
    parts = -(-length // size)
    if parts * size != length:
        values = torch.nn.functional.pad(values, (0, parts * size - length))
    sums[:, first:first + parts] += values.view(values.shape[0], parts, size).sum(dim=2)


def _dependence_terms(o: torch.Tensor, r: torch.Tensor, p: torch.Tensor | None,
                      options: EvalOptions) -> torch.Tensor | None:
    """Per element: squared error, squared change from the previous trial's reference, squared
    reference, squared tolerance band, in the working precision; None when the step needs the
    exact path."""
    r_abs = r.abs()
    largest = max(r_abs.max().item(), o.abs().max().item(), p.abs().max().item() if p is not None else 0.0)
    if not largest <= _FAST_PATH_LIMIT:
        return None
    values = torch.empty(4, r.numel(), dtype=r.dtype)
    torch.sub(o, r, out=values[0]).square_()
    if p is None:
        values[1].zero_()
    else:
        torch.sub(r, p, out=values[1]).square_()
    torch.mul(r, r, out=values[2])
    torch.mul(r_abs, options.rtol, out=values[3]).add_(options.atol).square_()
    return values


def _dependence_terms_exact(o: torch.Tensor, r: torch.Tensor, p: torch.Tensor | None,
                            options: EvalOptions) -> torch.Tensor:
    """The same in float64, where a non-finite value on either side counts as no error and no
    change (compare_outputs already required NaN and infinities to match)."""
    r_finite = torch.isfinite(r)
    zero = torch.zeros((), dtype=torch.float64)
    error = torch.where(r_finite & torch.isfinite(o), o - r, zero).square()
    if p is None:
        change = torch.zeros_like(r)
    else:
        change = torch.where(r_finite & torch.isfinite(p), r - p, zero).square()
    ref = torch.where(r_finite, r, zero)
    band = torch.where(r_finite, ref.abs() * options.rtol + options.atol, zero)
    return torch.stack([error, change, ref.square(), band.square()])

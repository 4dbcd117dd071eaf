"""Problem health: references that no candidate can be judged fairly against, flagged before
any candidate is blamed for them.

Run in the reference's own sandbox, on the reference alone:
  nondeterministic    the same inputs twice give different outputs (dropout left in training
                      mode, random numbers drawn in forward, unseeded state)
  input_independent   two different inputs give the same outputs: a constant answer is correct
  near_constant       an output whose elements are all (nearly) equal
  below_tolerance     every output's RMS is below atol: zeros pass an allclose check
  degenerate_output   an output moves between input sets by at most about its tolerance band
                      and the relative-L2 bound (losses, means over many random values): the
                      best constant passes both, and only the referee's input-dependence check
                      (compare.InputDependence) tells a computed answer from a guessed one.
                      Flagged when the RMS movement is within DEGENERATE_SPREAD (2) times both
                      the RMS of atol + rtol |ref| and max_rel_error x RMS(ref), and above
                      rounding noise; exact for outputs of up to 1024 elements, estimated from
                      the fingerprints' block sums beyond
  does_not_fit        the reference runs out of memory on this device
  reference_fails     the reference raises (the message says why)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch

from kernelopt.kernelbench import ProblemError
from kernelopt.sandbox import compare
from kernelopt.sandbox.results import EvalOptions

_OOM_MARKERS = ("out of memory", "CUDA error: out of memory", "MemoryError", "exceeded the memory limit")
_CONSTANT_REL_STD = 1e-6


@dataclass
class Health:
    flags: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.flags

    def flag(self, name: str, detail: str) -> None:
        if name not in self.flags:
            self.flags.append(name)
        self.details.append(f"{name}: {detail}")

    def as_dict(self) -> dict:
        return {"healthy": self.healthy, "flags": self.flags, "details": self.details}


def check_health(evaluator, options: EvalOptions) -> Health:
    """Probe the Evaluator's reference: seeds a, a, b, c in one request."""
    health = Health()
    first, second, third = random.SystemRandom().sample(range(1, 2**31 - 1), 3)
    try:
        calls = evaluator.probe_reference([first, first, second, third])
    except ProblemError as exc:
        oom = any(marker in exc.cause for marker in _OOM_MARKERS)
        health.flag("does_not_fit" if oom else "reference_fails", exc.cause[:500])
        return health
    same_a, same_b, *others = calls
    meta = [list(m) for m in same_a["meta"]]
    if same_a["meta"] != same_b["meta"] or compare.compare_fingerprints(
            same_b["fingerprints"], same_a["fingerprints"], meta, options):
        health.flag("nondeterministic", "the same inputs gave different outputs on a second call (dropout in "
                    "training mode, or random numbers drawn in forward?)")
    if all(o["meta"] == same_a["meta"] and o["fingerprints"] == same_a["fingerprints"] for o in others):
        health.flag("input_independent", "different inputs gave identical outputs: a constant answer is correct")
    _check_magnitudes(health, same_a, options)
    if not {"nondeterministic", "input_independent"} & set(health.flags):
        _check_spread(health, [same_a, *others], options)
    return health


def _check_magnitudes(health: Health, call: dict, options: EvalOptions) -> None:
    rms_values = []
    for index, (fingerprint, (shape, dtype, _)) in enumerate(zip(call["fingerprints"], call["meta"])):
        numel = math.prod(shape)
        if numel == 0 or "bool" in dtype:
            continue
        total, _, squares = fingerprint["sums"][:3]
        mean, rms = total / numel, math.sqrt(max(squares, 0.0) / numel)
        rms_values.append(rms)
        spread = math.sqrt(max(squares / numel - mean * mean, 0.0))
        if numel > 1 and spread <= _CONSTANT_REL_STD * max(abs(mean), 1e-30):
            health.flag("near_constant", f"output {index} is constant ({mean:.3g}) across its {numel} elements")
    if rms_values and max(rms_values) < options.atol:
        health.flag("below_tolerance", f"every output's RMS (largest {max(rms_values):.3g}) is below atol "
                    f"{options.atol:g}: all zeros would pass allclose (the referee's relative-L2 bound still "
                    "applies)")


def _check_spread(health: Health, calls: list[dict], options: EvalOptions) -> None:
    """Flag `degenerate_output`: how far each output moves between the calls' different inputs,
    against its tolerance band and the referee's relative-L2 bound.

    The fingerprints hold sums over up to 1024 contiguous blocks of each output, not the values.
    For outputs of at most 1024 elements every block is one element and the movement is exact.
    For larger ones, for each block B and pair of calls, (change of sum_B x)^2 / |B| and (change
    of sum_B |x|)^2 / |B| are lower bounds of the block's squared change (Cauchy-Schwarz); their
    total over the blocks, divided by the number of elements rather than by |B| per block, is
    the mean squared change per element whenever a block's elements move independently of each
    other (more when they move together, less when they cancel: rows normalized within one
    block), and never less than the sound lower bound. Movement at the level of the dtype's
    rounding is not flagged; movement above it but within what honest arithmetic may err by
    (compare.NOISE_SPREAD x compare.honest_relative_error) is flagged with a note that the
    referee cannot enforce input dependence there.
    """
    first = calls[0]
    for index, (shape, dtype, _device) in enumerate(first["meta"]):
        torch_dtype = getattr(torch, str(dtype).rsplit(".", 1)[-1], None)
        if not isinstance(torch_dtype, torch.dtype) or not (torch_dtype.is_floating_point or torch_dtype.is_complex):
            continue
        if any(list(call["meta"][index]) != list(first["meta"][index]) for call in calls):
            continue
        numel = math.prod(shape) * (2 if torch_dtype.is_complex else 1)
        prints = [call["fingerprints"][index] for call in calls]
        count = len(prints[0]["blocks"])
        if numel == 0 or count == 0 or any(len(p["blocks"]) != count for p in prints):
            continue
        size = -(-numel // count)
        sizes = [size] * (count - 1) + [numel - (count - 1) * size]
        moves = []
        for i in range(len(prints)):
            for j in range(i + 1, len(prints)):
                a, b = prints[i], prints[j]
                blocks = sum(max((xa - xb) ** 2, (ya - yb) ** 2)
                             for xa, xb, ya, yb in zip(a["blocks"], b["blocks"], a["block_abs"], b["block_abs"]))
                norms = (math.sqrt(max(a["sums"][2], 0.0)) - math.sqrt(max(b["sums"][2], 0.0))) ** 2
                moves.append(max(blocks, norms) / numel)
        move = math.sqrt(sum(moves) / len(moves))
        exact = all(s == 1 for s in sizes)
        squares = sum(max(p["sums"][2], 0.0) for p in prints) / (len(prints) * numel)
        band_squares = sum(numel * options.atol ** 2 + 2 * options.atol * options.rtol * p["sums"][1]
                           + options.rtol ** 2 * max(p["sums"][2], 0.0) for p in prints) / (len(prints) * numel)
        rms, band = math.sqrt(squares), math.sqrt(band_squares)
        relative = options.effective_max_rel_error() * rms
        if move <= compare.NOISE_SPREAD * compare.rounding_relative_error(torch_dtype) * rms:
            continue  # moves by rounding only (softmax row sums, a normalized vector's norm)
        if move <= compare.DEGENERATE_SPREAD * min(band, relative):
            how = "" if exact else " (estimated from block sums)"
            honest = compare.honest_relative_error(torch_dtype) * rms
            dtype_name = str(torch_dtype).replace("torch.", "")
            demand = (f"the referee demands an error under {compare.INPUT_DEPENDENCE_RATIO:g}x that movement"
                      if move > compare.NOISE_SPREAD * honest else
                      f"that is less than {compare.NOISE_SPREAD:g}x what honest {dtype_name} code may err by "
                      f"({honest:.3g} RMS), so the referee does not enforce input dependence here and a constant "
                      "answer is judged correct")
            health.flag("degenerate_output",
                        f"output {index} (shape {tuple(shape)}) moves by {move:.3g} RMS between input sets{how}, "
                        f"within {compare.DEGENERATE_SPREAD:g}x both its tolerance band ({band:.3g} RMS) and the "
                        f"relative-L2 bound ({relative:.3g} of its {rms:.3g} RMS): a constant answer would pass "
                        f"allclose; {demand}")

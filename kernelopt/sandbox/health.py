"""Problem health: references that no candidate can be judged fairly against, flagged before
any candidate is blamed for them.

Run in the reference's own sandbox, on the reference alone:
  nondeterministic    the same inputs twice give different outputs (dropout left in training
                      mode, random numbers drawn in forward, unseeded state)
  input_independent   two different inputs give the same outputs: a constant answer is correct
  near_constant       an output whose elements are all (nearly) equal
  below_tolerance     every output's RMS is below atol: zeros pass an allclose check
  does_not_fit        the reference runs out of memory on this device
  reference_fails     the reference raises (the message says why)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

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
    """Probe the Evaluator's reference: seeds a, a, b in one request."""
    health = Health()
    first, second = random.SystemRandom().sample(range(1, 2**31 - 1), 2)
    try:
        calls = evaluator.probe_reference([first, first, second])
    except ProblemError as exc:
        oom = any(marker in exc.cause for marker in _OOM_MARKERS)
        health.flag("does_not_fit" if oom else "reference_fails", exc.cause[:500])
        return health
    same_a, same_b, other = calls
    meta = [list(m) for m in same_a["meta"]]
    if same_a["meta"] != same_b["meta"] or compare.compare_fingerprints(
            same_b["fingerprints"], same_a["fingerprints"], meta, options):
        health.flag("nondeterministic", "the same inputs gave different outputs on a second call (dropout in "
                    "training mode, or random numbers drawn in forward?)")
    if other["meta"] == same_a["meta"] and other["fingerprints"] == same_a["fingerprints"]:
        health.flag("input_independent", "two different inputs gave identical outputs: a constant answer is correct")
    _check_magnitudes(health, same_a, options)
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

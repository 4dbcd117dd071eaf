"""Where a batch's wall time goes, from its verdicts: each EvalResult's `durations` (seconds per
phase, kernelopt/sandbox/session.py) and `builds`, summed over the batch.

The phases of one candidate in an `Evaluator` batch (kernelopt/sandbox/batch.py):

- `startup`: its worker taken (started ahead, so usually ready) and, before judging, the warm
  reference worker checked;
- `load`: its module loaded in its worker, builds included, then the reference re-loaded for it;
- `build`: the part of `load` spent waiting for the host's builder (compile, or cache lookup);
- `waiting`: loaded, waiting for the device while the candidate ahead of it is judged;
- `correctness`, `timing` and `profile` (--profile only): on the device, one candidate at a time.

With `--jobs J`, up to J candidates are in flight: the judged one, and the others starting,
loading and compiling beside it. So the sums of `startup`, `load`, `build` and `waiting` may
pass the wall time (they overlap each other and the judged candidate), while `correctness`,
`timing` and `profile` never overlap another candidate's: their sum is the time the device was
held by a judged candidate. A candidate whose verdict came while loading (a compile error) has no
judged phases.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kernelopt.sandbox.results import EvalResult

# Held the device, one candidate at a time.
JUDGED_PHASES = ("correctness", "timing", "profile")
# Run for several candidates at once, beside the judged one.
OVERLAPPING_PHASES = ("startup", "load", "build", "waiting")
PHASES = ("startup", "load", "build", "waiting", "correctness", "timing", "profile")
PHASE_WORDS = {
    "startup": "startup (worker taken, reference checked)",
    "load": "load (candidate and reference; builds included)",
    "build": "build (waits for the host's builder, within load)",
    "waiting": "waiting for the device (loaded)",
    "correctness": "correctness trials",
    "timing": "timing rounds",
    "profile": "profiling pass (--profile)",
}


@dataclass(frozen=True)
class Verdict:
    """One candidate's verdict and the moment it was reached (seconds since the epoch)."""

    candidate: str
    at: float
    result: EvalResult


@dataclass(frozen=True)
class PhaseTotal:
    name: str
    seconds: float  # summed over the batch's candidates
    share: float  # of the batch's wall time (may pass 1 for an overlapping phase)
    candidates: int  # how many candidates spent time in it
    overlaps: bool  # runs beside the judged candidate

    def as_dict(self) -> dict:
        return {"seconds": round(self.seconds, 3), "share": round(self.share, 4),
                "candidates": self.candidates, "overlaps": self.overlaps}


def judged_seconds(result: EvalResult) -> float:
    """Seconds the candidate held the device: its correctness, timing and profiling."""
    return sum(result.durations.get(name, 0.0) for name in JUDGED_PHASES)


def phase_totals(results: Iterable[EvalResult], wall: float) -> list[PhaseTotal]:
    """Every phase's seconds summed over the results, and their share of `wall`; phases no
    candidate spent time in are left out."""
    results = list(results)
    totals = []
    for name in PHASES:
        spent = [r.durations[name] for r in results if r.durations.get(name, 0.0) > 0]
        if spent:
            totals.append(PhaseTotal(name, sum(spent), sum(spent) / wall if wall > 0 else 0.0,
                                     len(spent), name in OVERLAPPING_PHASES))
    return totals


def judged_windows(verdicts: Iterable[Verdict]) -> list[tuple[float, float]]:
    """When each candidate held the device, placed back from its verdict's moment: (verdict
    time - its judged seconds, verdict time). A slight overestimate of the start: the moment is
    when its verdict was read, after the candidate's worker was closed."""
    return [(v.at - judged_seconds(v.result), v.at) for v in verdicts if judged_seconds(v.result) > 0]


def build_summary(results: Iterable[EvalResult]) -> dict:
    """The batch's builds: how many were compiled or found in the cache, and their times."""
    records = [b for r in results for b in r.builds]
    compiled = [b.build_seconds for b in records if not b.cached]
    waits = [b.wait_seconds for b in records]
    return {
        "builds": len(records),
        "compiled": len(compiled),
        "cached": sum(1 for b in records if b.cached),
        "failed": sum(1 for b in records if not b.ok),
        "modes": dict(Counter(b.mode for b in records if not b.cached)),
        "compile_seconds": round(sum(compiled), 3),
        "compile_seconds_median": round(statistics.median(compiled), 3) if compiled else None,
        "wait_seconds": round(sum(waits), 3),
    }


def statuses(results: Iterable[EvalResult]) -> dict[str, int]:
    return dict(Counter(r.status for r in results))


def per_candidate(verdicts: Iterable[Verdict], started: float) -> list[dict]:
    """The raw durations and builds of every candidate, with its verdict's moment relative to
    the batch's start."""
    return [{"candidate": v.candidate, "status": v.result.status, "speedup": v.result.speedup,
             "verdict_at_s": round(v.at - started, 3), "durations": dict(v.result.durations),
             "builds": [b.model_dump() for b in v.result.builds]}
            for v in verdicts]

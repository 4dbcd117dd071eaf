"""Profile-guided feedback, the host's side: what the `profile` command asks each worker, how
its replies become an `EvalResult.profile`, and the short table the model, `runs show` and the
report show.

The pass runs after a correct verdict (session.CandidateSession._profile_pass) and is advisory:
no status, speedup or reward comes from it, it is time-bounded, and whatever goes wrong in it
becomes a note. The candidate's side runs in the candidate's own process, so a candidate could
distort its own profile; that only misleads its own search (docs/referee.md). The FLOPs and
bytes of the roofline come from the trusted reference worker, and each side's speed of light
from the verdict's own mean times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import ValidationError

from kernelopt.sandbox import hardware
from kernelopt.sandbox.results import Profile, ProfileRow, Roofline, SideProfile, Timing
from kernelopt.sandbox.worker import commands

PROFILE_BUDGET_S = 0.5  # profiled calls per side, after one warm-up call
SIDE_LIMIT_S = 30.0  # the host's wait per side beyond its calls (the profiler's start-up)
NCU_LIMIT_S = 100.0  # more on a GPU, where Nsight Compute may run (worker/profiling.NCU_TIMEOUT_S)
MAX_ITERATIONS = 10  # worker/profiling.MAX_ITERATIONS
MAX_ROWS = 8
NAME_CHARS = 160
SHOWN_NAME_CHARS = 70
# The datasheet column (hardware._GPU_PEAKS) for the inputs' precision; FP16 runs at BF16's rate.
_PEAK_COLUMN = {"fp32": "fp32", "bf16": "bf16", "fp16": "bf16"}
_METRIC_WORDS = (("dram", "DRAM"), ("sm", "SM"), ("occupancy", "occupancy"))


@dataclass
class ReferenceProfile:
    """The reference's part of the pass: the same for every candidate of an Evaluator (same
    problem, same input set), so it is made once and kept."""

    input_set: object  # records.InputSet: the one trusted input set both sides are profiled on
    reply: dict | None
    notes: list[str] = field(default_factory=list)


def message(count_work: bool, device: str) -> dict:
    """The `profile` command's settings (the call frame adds seed, spec and the inputs)."""
    return {"cmd": commands.PROFILE, "budget_s": PROFILE_BUDGET_S, "count_work": count_work,
            "ncu": device.startswith("cuda")}


def side_limit(device: str, timing: Timing | None) -> float:
    """Seconds the host waits for one side's reply: start-up, the profiled calls, the flop
    counter's call and, on a GPU, Nsight Compute."""
    slowest_s = max(timing.reference_ms, timing.candidate_ms) / 1e3 if timing is not None else 0.0
    return SIDE_LIMIT_S + slowest_s * 2 * (MAX_ITERATIONS + 3) + (NCU_LIMIT_S if device.startswith("cuda") else 0.0)


def side_profile(reply: dict | None, who: str, notes: list[str]) -> SideProfile | None:
    """A worker's reply as a SideProfile, checked (a candidate's is untrusted: a malformed one
    is a note) and capped; its own notes join `notes`."""
    if reply is None:
        return None
    notes.extend(f"{who}: {_printable(str(note)[:300])}" for note in list(reply.get("notes") or [])[:5])
    try:
        rows = [ProfileRow.model_validate(row) for row in list(reply.get("rows") or [])[:MAX_ROWS]]
        side = SideProfile(unit=reply.get("unit"), total_ms=reply.get("total_ms"),
                           iterations=reply.get("iterations"), rows=rows)
    except (ValidationError, TypeError) as exc:
        notes.append(f"{who}: the profile reply was malformed ({str(exc).splitlines()[0][:200]})")
        return None
    numbers = [side.total_ms] + [v for r in rows for v in (r.share, r.calls, r.ms)]
    if not all(math.isfinite(v) and v >= 0 for v in numbers):
        notes.append(f"{who}: the profile reply had negative or non-finite times")
        return None
    for row in rows:
        row.name = _printable(row.name[:NAME_CHARS])
        row.metrics = {k: v for k, v in row.metrics.items() if k in dict(_METRIC_WORDS) and math.isfinite(v)}
    attach_metrics(rows, reply.get("ncu"))
    return side


def _printable(text: str) -> str:
    """Untrusted text for a terminal, a prompt or a page: control characters (terminal escape
    sequences) become '?'."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def attach_metrics(rows: list[ProfileRow], metrics: object) -> None:
    """Nsight Compute's metrics (kernel name -> {dram, sm, occupancy}) onto the profiler's rows:
    by the kernel's name, else by its function name alone (_base_name)."""
    if not isinstance(metrics, dict):
        return
    by_base = {_base_name(name): found for name, found in metrics.items()}
    for row in rows:
        found = metrics.get(row.name) or by_base.get(_base_name(row.name))
        if isinstance(found, dict):
            row.metrics = {key: float(value) for key, value in found.items()
                           if key in dict(_METRIC_WORDS) and isinstance(value, (int, float)) and math.isfinite(value)}


def _base_name(name: str) -> str:
    """A kernel's function name without return type, namespaces, template arguments and
    parameters: how the profiler's and Nsight Compute's spellings of one kernel can differ."""
    name = name.replace("(anonymous namespace)::", "").removeprefix("void ").strip()
    cut = min([i for i in (name.find("<"), name.find("(")) if i >= 0], default=len(name))
    return name[:cut].rsplit("::", 1)[-1].strip()


def roofline(reply: dict | None, device: str, device_name: str | None) -> Roofline | None:
    """The problem's FLOPs and bytes (from the reference worker) against the device's peaks:
    the datasheet figures of a known GPU (hardware.py); none on a CPU."""
    if reply is None or not isinstance(reply.get("bytes"), int):
        return None
    flops = reply.get("flops") if isinstance(reply.get("flops"), int) else None
    precision = reply.get("precision") if isinstance(reply.get("precision"), str) else None
    peaks = hardware.peak_figures(device_name) if device.startswith("cuda") and device_name else None
    result = Roofline(flops=flops, bytes=reply["bytes"], precision=precision)
    if peaks:
        result.peak_tbs = peaks.get("bandwidth_tbs")
        result.peak_tflops = peaks.get(_PEAK_COLUMN.get(precision or "", ""))
    bounds = []
    if result.peak_tbs:
        bounds.append(result.bytes / (result.peak_tbs * 1e12))
    if result.peak_tflops and flops:
        bounds.append(flops / (result.peak_tflops * 1e12))
    if bounds:
        result.bound_ms = max(bounds) * 1e3
    return result


def with_rates(side: SideProfile | None, measured_ms: float, line: Roofline | None) -> None:
    """The side's achieved rates and speed of light at the verdict's mean time per call."""
    if side is None or measured_ms <= 0:
        return
    side.measured_ms = measured_ms
    if line is None:
        return
    seconds = measured_ms / 1e3
    side.gbytes = line.bytes / seconds / 1e9
    side.gflops = line.flops / seconds / 1e9 if line.flops is not None else None
    side.speed_of_light = line.bound_ms / measured_ms if line.bound_ms is not None else None


def assemble(device: str, kept: ReferenceProfile, candidate_reply: dict | None, timing: Timing,
             device_name: str | None, notes: list[str], seconds: float) -> Profile:
    all_notes = list(kept.notes)
    reference = side_profile(kept.reply, "reference", all_notes)
    candidate = side_profile(candidate_reply, "candidate", all_notes)
    line = roofline(kept.reply, device, device_name)
    with_rates(reference, timing.reference_ms, line)
    with_rates(candidate, timing.candidate_ms, line)
    all_notes += notes
    return Profile(device=device, reference=reference, candidate=candidate, roofline=line,
                   notes=[_printable(note) for note in dict.fromkeys(all_notes)], seconds=round(seconds, 4))


# the table ------------------------------------------------------------------------------------

def table(profile: Profile) -> str:
    """The profile as a few plain-text lines: per side its largest kernels (ops) with their
    share, launches and time per forward, then the roofline and the notes."""
    lines = []
    for who, side in (("reference", profile.reference), ("candidate", profile.candidate)):
        if side is None:
            continue
        unit = "GPU kernels" if side.unit == "kernel" else "CPU ops, self time"
        lines.append(f"{who}: {side.total_ms:.4g} ms per forward in {unit} (torch.profiler over "
                     f"{side.iterations} calls)")
        lines.append(f"  {'share':>6s} {'ms':>9s} {'calls':>6s}  {side.unit}")
        lines.extend(f"  {row.share:6.1%} {row.ms:9.4g} {row.calls:6.3g}  {_shown(row.name)}{_metrics(row)}"
                     for row in side.rows)
    line = profile.roofline
    if line is not None:
        flops = (_amount(line.flops, "FLOP") if line.flops else "FLOPs not counted" if line.flops is None
                 else "0 FLOPs counted (only matmuls, convolutions and attention count)")
        peaks = ", ".join(([f"{line.peak_tflops:g} TFLOP/s {line.precision.upper()}"]
                           if line.peak_tflops and line.precision else [])
                          + ([f"{line.peak_tbs:g} TB/s"] if line.peak_tbs else []))
        lines.append(f"roofline: {flops}, >= {_amount(line.bytes, 'B')} moved per call (the problem's work, "
                     "counted on the reference)")
        lines.append("  bytes: inputs, weights and outputs once each, a lower bound"
                     + (f"; device peak {peaks}" if peaks else "; no peak figures for this device"))
        for who, side in (("reference", profile.reference), ("candidate", profile.candidate)):
            if side is not None and side.measured_ms is not None:
                lines.append(f"  {who} at its {side.measured_ms:.4g} ms per call: " + _rates(side))
    lines.extend(f"note: {note}" for note in profile.notes)
    return "\n".join(lines)


def _rates(side: SideProfile) -> str:
    parts = []
    if side.speed_of_light is not None:
        parts.append(f"{side.speed_of_light:.1%} of speed of light")
    if side.gflops is not None:  # the problem's FLOPs: work the candidate may have skipped counts as done
        parts.append(_amount(side.gflops * 1e9, "FLOP/s") + " (the reference's work)")
    if side.gbytes is not None:
        parts.append(_amount(side.gbytes * 1e9, "B/s"))
    return ", ".join(parts) or "no rates"


def _amount(value: float, unit: str) -> str:
    """1.374e11 FLOP -> '137.4 GFLOP'; at least mega (M), at most tera (T)."""
    for scale, prefix in ((1e12, "T"), (1e9, "G")):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value / 1e6:.4g} M{unit}"


def _shown(name: str) -> str:
    return name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS - 3] + "..."


def _metrics(row: ProfileRow) -> str:
    found = [f"{word} {row.metrics[key]:.0f}%" for key, word in _METRIC_WORDS if key in row.metrics]
    return f"  [{', '.join(found)} of peak]" if found else ""

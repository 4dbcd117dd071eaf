"""The physical floor of a call: no honest call can move its bytes faster than the device's
fastest memory, so a time below that is a measurement gone wrong or a forged one
(docs/referee.md, "The physical floor").

    floor_ms = max(bytes / ceiling bandwidth, flops / ceiling FLOP/s)

where the bytes are what one call must move (its inputs read once, its outputs written once,
counted by trusted code on the reference's trials) and the FLOPs count where they are known (a
plain verdict does not count them: there the bytes alone give the floor). The ceilings, each a
true upper bound on what a call can reach:

- a CPU: the highest copy or sum bandwidth of one thread (the workers' setting) over working
  sets from L1-sized to DRAM-sized, measured once per machine by the host in a child process
  (bandwidth_probe.py) and cached in a JSON file keyed by the machine's identity;
- a GPU of the datasheet table (hardware.py): the DRAM bandwidth, and for the part of a call's
  bytes that fits the L2 (inputs placed just before a call can sit there) L2_FACTOR times it;
- another GPU: a measured device-to-device copy bandwidth, cached the same way, with the same
  L2 allowance;
- `KERNELOPT_CEILING_BANDWIDTH` (GB/s) overrides all of them: for a machine that is misdetected,
  and for tests that make the floor fire.

A candidate is held to the floor with a margin (RULE_MARGIN): only a mean time per call below
floor / RULE_MARGIN is re-measured and then rejected (rules.faster_than_physics). A reference
below its floor means the floor is wrong, never the candidate: the floor is then dropped, with a
note. Each side's fraction of speed of light is floor / its mean time per call.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from kernelopt.sandbox import hardware

if TYPE_CHECKING:
    from kernelopt.sandbox.results import Timing

RULE_MARGIN = 1.5  # a candidate is rejected only below floor / RULE_MARGIN
L2_FACTOR = 4.0  # a GPU's L2 bandwidth is held to at most this many times its DRAM bandwidth
OVERRIDE_ENV = "KERNELOPT_CEILING_BANDWIDTH"  # GB/s: the ceiling, whatever the device
CACHE_ENV = "KERNELOPT_CEILINGS"  # the JSON file of measured ceilings
PROBE_TIMEOUT_S = 60.0
PROBE = Path(__file__).with_name("bandwidth_probe.py")


@dataclass(frozen=True)
class Ceiling:
    """The fastest a call on this device can move bytes: bandwidth in GB/s (DRAM on a GPU), the
    L2 (bytes, GB/s) where a part of the call can be served from it, and where it comes from."""

    bandwidth_gbs: float
    source: str  # measured, datasheet, override
    detail: str
    l2_bytes: int = 0
    l2_gbs: float = 0.0
    flops_per_s: float | None = None  # peak at the call's precision, where known


@dataclass(frozen=True)
class Floor:
    """No call can take less than `ms`: `bytes` moved at the ceiling (and `flops`, where known)."""

    ms: float
    bytes: int
    ceiling: Ceiling
    flops: int | None = None

    def sol(self, measured_ms: float) -> float | None:
        """The fraction of speed of light of a call measured at `measured_ms`: 1 at the floor."""
        return self.ms / measured_ms if measured_ms > 0 else None

    def impossible(self, measured_ms: float) -> bool:
        """Faster than the floor by more than the rule's margin."""
        return measured_ms * RULE_MARGIN < self.ms

    def basis(self) -> str:
        """What the floor rests on, in words."""
        c = self.ceiling
        l2 = (f" ({c.l2_bytes / 2**20:.0f} MiB of it from L2 at {c.l2_gbs:.4g} GB/s)"
              if c.l2_bytes and c.l2_gbs else "")
        flops = f" and {self.flops:.4g} FLOP at {c.flops_per_s / 1e12:.4g} TFLOP/s" if self.flops and c.flops_per_s else ""
        return f"{_amount(self.bytes)} at {c.bandwidth_gbs:.4g} GB/s{l2}{flops} ({c.source}: {c.detail})"


def floor_ms(nbytes: int, ceiling: Ceiling, flops: int | None = None) -> float:
    """The least time in ms a call that moves `nbytes` (and computes `flops`) can take: the part
    of the bytes that fits the L2 at its bandwidth, the rest at the DRAM's (a CPU's ceiling is
    one bandwidth), or the FLOPs at the peak, whichever is longer."""
    in_l2 = min(nbytes, ceiling.l2_bytes) if ceiling.l2_gbs > 0 else 0
    seconds = (nbytes - in_l2) / (ceiling.bandwidth_gbs * 1e9) + (in_l2 / (ceiling.l2_gbs * 1e9) if in_l2 else 0.0)
    if flops and ceiling.flops_per_s:
        seconds = max(seconds, flops / ceiling.flops_per_s)
    return seconds * 1e3


def floor_for(device: str, device_name: str | None, nbytes: int, flops: int | None = None) -> Floor | None:
    """The floor of a call on `device` that moves `nbytes`, or None where no ceiling is known
    (the probe failed: a note in the log, never a verdict)."""
    found = ceiling_for(device, device_name)
    if found is None or nbytes <= 1:
        return None
    return Floor(ms=floor_ms(nbytes, found, flops), bytes=nbytes, ceiling=found, flops=flops)


# -- the ceilings -----------------------------------------------------------------------------

def ceiling_for(device: str, device_name: str | None) -> Ceiling | None:
    """The device's ceiling: the override, the datasheet (a known GPU), else measured once per
    machine and cached. The host never touches the GPU itself: a known GPU's figures come from
    the table, an unknown one's from the probe's child process."""
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        return Ceiling(bandwidth_gbs=override_bandwidth(override), source="override", detail=f"${OVERRIDE_ENV}")
    gpu = device.startswith("cuda")
    peaks = hardware.peak_figures(device_name) if gpu and device_name else None
    if peaks:
        dram = peaks["bandwidth_tbs"] * 1e3
        l2 = hardware.l2_bytes(cast(str, device_name)) or 0
        return Ceiling(bandwidth_gbs=dram, source="datasheet", detail=f"{device_name}, DRAM", l2_bytes=l2,
                       l2_gbs=dram * L2_FACTOR if l2 else 0.0)
    measured = measured_ceiling(device, device_name)
    if measured is None:
        return None
    bandwidth, l2 = measured["bandwidth_gbs"], int(measured.get("l2_bytes") or 0) if gpu else 0
    return Ceiling(bandwidth_gbs=bandwidth, source="measured", detail=measured["detail"], l2_bytes=l2,
                   l2_gbs=bandwidth * L2_FACTOR if l2 else 0.0)


def override_bandwidth(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(f"${OVERRIDE_ENV} must be a positive number of GB/s, not {text!r}")
    return value


def cache_path() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "kernelopt" / "ceilings.json"


def machine_key(device: str, device_name: str | None = None) -> str:
    """What a measured ceiling belongs to: the CPU's model and core count, the device, the GPU's
    name, the kernel, torch's version, the workers' thread count and the probe's own code."""
    import torch

    name = hardware.cpu_model()
    if device.startswith("cuda"):
        name += f" / {device_name}"
    parts = [name, str(os.cpu_count()), device.split(":")[0], platform.machine(), platform.release(),
             torch.__version__, worker_threads(), hashlib.sha256(PROBE.read_bytes()).hexdigest()[:12]]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


_lock = threading.Lock()
_known: dict[tuple[str, str], dict] = {}  # (cache file, key) -> entry, for this process


def measured_ceiling(device: str, device_name: str | None = None) -> dict | None:
    """{"bandwidth_gbs", "detail", ("l2_bytes")} for this machine and device: from this process's
    memory, the cache file, or a fresh measurement (then written to the file). None when the
    probe fails."""
    key, path = machine_key(device, device_name), cache_path()
    with _lock:
        entry = _known.get((str(path), key)) or read_cache(path).get(key)
        if entry is None:
            entry = probe(device)
            if entry is None:
                return None
            write_cache(path, key, entry)
        _known[(str(path), key)] = entry
        return entry


def read_cache(path: Path) -> dict[str, dict]:
    """The cache file's valid entries (a missing, unreadable or corrupt file: none)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: entry for key, entry in data.items() if _valid(entry)}


def _valid(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    value, l2 = entry.get("bandwidth_gbs"), entry.get("l2_bytes", 0)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e6 \
        and isinstance(entry.get("detail", ""), str) and isinstance(l2, int) and 0 <= l2 < 2**40


def write_cache(path: Path, key: str, entry: dict) -> None:
    """Add `entry` under `key`, atomically (a rename), keeping the other machines' entries."""
    data = read_cache(path)
    data[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".ceilings-", delete=False,
                                         encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
        os.replace(handle.name, path)
    except OSError:
        pass  # a read-only home: measured again by the next process


def probe(device: str) -> dict | None:
    """Run bandwidth_probe.py in a child process with the workers' thread settings
    (isolation.worker_environment: one thread unless OMP_NUM_THREADS says otherwise)."""
    environment = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": worker_threads()}
    environment.setdefault("MKL_NUM_THREADS", environment["OMP_NUM_THREADS"])
    try:
        done = subprocess.run([sys.executable, "-E", "-s", str(PROBE), device], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, env=environment)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return found if _valid(found) else None


def worker_threads() -> str:
    return os.environ.get("OMP_NUM_THREADS") or "1"


def combined_floor(timing: Timing, each: list[Timing]) -> None:
    """A verdict over several input configurations (shaped.py), whose times are geometric means:
    the floor is the geometric mean of theirs, so each side's SOL is the geometric mean of its
    SOLs; none where any configuration has none. No one configuration's bytes are kept, so a
    held-out configuration's size does not show."""
    floors = [t.floor_ms for t in each]
    timing.floor_bytes, timing.reference_sol, timing.candidate_sol = None, None, None
    notes = [t.floor_note for t in each if t.floor_note]
    timing.floor_note = notes[0] if notes else None
    if not floors or any(f is None for f in floors):
        timing.floor_ms = timing.floor_basis = None
        return
    timing.floor_ms = math.exp(sum(math.log(cast(float, f)) for f in floors) / len(floors))
    timing.floor_basis = f"the geometric mean of {len(floors)} input configurations' floors"
    timing.reference_sol, timing.candidate_sol = timing.floor_ms / timing.reference_ms, \
        timing.floor_ms / timing.candidate_ms


def sol_text(timing: Timing | None) -> str | None:
    """A correct verdict's floor and both sides' fractions of speed of light (results.Timing), in
    one line: for `kernelopt eval`, the model's feedback and the report; None without a floor."""
    if timing is None or timing.floor_ms is None:
        return None
    moved = f"{_amount(timing.floor_bytes)} at {timing.floor_bandwidth_gbs:.4g} GB/s, " \
        if timing.floor_bytes and timing.floor_bandwidth_gbs else ""
    return (f"speed of light: candidate {_percent(timing.candidate_sol)}, reference {_percent(timing.reference_sol)} "
            f"(the physical floor over the mean time per call; floor {timing.floor_ms:.4g} ms: {moved}"
            f"{timing.floor_source})")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}" if value < 0.01 else f"{value:.1%}"


def _amount(nbytes: float) -> str:
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {prefix}B"
    return f"{nbytes:.0f} B"

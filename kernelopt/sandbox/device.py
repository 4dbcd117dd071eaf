"""Where an evaluation runs: the device a request names, the memory a worker may use, the CPU
cores timed calls run on. Light to import: torch is loaded only to resolve a CUDA device."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from kernelopt.sandbox.results import EvalOptions

_DEVICE_HELP = "use auto, cpu, cuda or cuda:N"


def resolve_device(requested: str) -> str:
    """'auto' -> 'cuda:0' when CUDA is available, else 'cpu'; validate the rest (ValueError)."""
    if requested == "cpu":
        return "cpu"
    if requested != "auto" and requested != "cuda" and not requested.startswith("cuda:"):
        raise ValueError(f"invalid device {requested!r}: {_DEVICE_HELP}")
    index = "0" if requested in ("auto", "cuda") else requested.split(":", 1)[1]
    if not index.isdigit():
        raise ValueError(f"invalid device {requested!r}: {_DEVICE_HELP}")
    import torch  # only here: asking CUDA is what costs the import

    if not torch.cuda.is_available():
        if requested == "auto":
            return "cpu"
        raise ValueError(f"device {requested!r} requested but CUDA is not available here")
    if int(index) >= torch.cuda.device_count():
        raise ValueError(f"device {requested!r}: only {torch.cuda.device_count()} CUDA device(s)")
    return f"cuda:{index}"


def default_memory_limit() -> int:
    """Resident memory per worker when the options name none: 3/8 of the host's RAM, so that the
    two workers of an evaluation leave a quarter to the host. (At half each, a problem with
    gigabytes of inputs could take all of the RAM without either worker passing its limit, and
    the kernel killed the host; the host also checks the machine's available memory before it
    reads a large reply: process.host_memory_room.)"""
    return ram_bytes() * 3 // 8


def ram_bytes() -> int:
    """The host's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def machine_memory_bytes() -> int:
    """The memory this process and what it starts can have in all: the physical memory, or the
    tightest limit of its memory cgroup and their ancestors (a container's) where that is less."""
    limits = [ram_bytes()]
    try:
        memberships = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return limits[0]
    for line in memberships:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            mounts = [Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")]
            base, name = next((m for m in mounts if (m / "cgroup.controllers").exists()), None), "memory.max"
        elif "memory" in controllers.split(","):
            base, name = Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"
        else:
            continue
        if base is None:
            continue
        group = base / path.lstrip("/")
        for directory in [group, *group.parents]:
            limits += _limit_in(directory / name)
            if directory == base:
                break
    return min(limits)


def _limit_in(path: Path) -> list[int]:
    try:
        text = path.read_text().strip()
    except OSError:
        return []
    return [int(text)] if text.isdigit() else []  # "max": none


def timing_cpus(options: EvalOptions, device: str) -> list[int] | None:
    """The CPU cores both workers run their timed calls on, one per round in turn, or None to
    leave them unpinned.

    Two processes on different cores see different speeds: a small CUDA kernel is timed partly
    on the host (launch, synchronisation), and an identical copy measured 0.85x-1.20x across
    evaluations on an H100 unpinned; on the 2-core development VM an exact copy of a
    memory-bound CPU kernel measured 0.57x-1.60x unpinned and 0.74x-1.21x pinned. On one core,
    both sides of a round run alike; changing the core between rounds keeps one core from
    deciding a whole evaluation. The cores are the last two this process may use (the first
    ones are where the OS places most work)."""
    if options.pin_timing == "off":
        return None
    return sorted(os.sched_getaffinity(0))[-2:]


def device_model(device: str) -> str:
    """'NVIDIA H100 80GB HBM3' for cuda:N (from nvidia-smi, so this process holds no CUDA
    context; N counts within CUDA_VISIBLE_DEVICES when it is set, as torch counts), else
    'cpu <the CPU's model name>'. What baselines are stored under and what a cluster's
    verdicts are grouped by."""
    if device.startswith("cuda"):
        index = device.partition(":")[2] or "0"
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        if visible and index.isdigit() and int(index) < len(visible):
            index = visible[int(index)].strip()
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", index],
                                  capture_output=True, text=True, timeout=20)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
        return f"{device} (model unknown)"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu " + platform.machine()


def busy_host_warning() -> str | None:
    """A warning when the host's one-minute load average exceeds its cores: both sides are
    still timed alike, but every reading is noisier (the intervals widen, and a reading moves
    more between evaluations), so a comparison with a quiet machine's is not fair."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = os.cpu_count() or 1
    if load <= cores:
        return None
    return (f"the host was busy: load average {load:.1f} on {cores} cores during this evaluation; timings are "
            "noisier than on a quiet machine (the interval says how much): compare speedups measured under "
            "the same load, or measure again on a quieter machine")

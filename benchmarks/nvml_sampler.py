"""The GPU's busy share over a stretch of wall time, from NVML (package `nvidia-ml-py`).

A `Sampler` polls a source in a thread; the source of a real GPU is `open_nvml(device)`. NVML's
GPU utilization is the percent of a sample period during which one or more kernels executed on
the GPU: it says a kernel was running, not how full the SMs were (one block on one SM counts as
busy). The driver keeps timestamped samples of it (`nvmlDeviceGetSamples`,
NVML_GPU_UTILIZATION_SAMPLES, one per driver period, 1/6 s to 1 s depending on the product);
where the driver does not offer them, `nvmlDeviceGetUtilizationRates(...).gpu` is polled
instead (the same percent over the driver's last period).

The busy share of a window is the time-weighted mean of the samples over it: a sample covers
the period from the sample before it to its own timestamp (both in seconds since the epoch:
NVML stamps samples with the host's clock), clipped to the window.

    source = open_nvml("cuda:0")
    with Sampler(source) as sampler:
        ...  # the work
        end = time.time()
    timeline = sampler.stop(until=end)
    timeline.busy(start, end).share
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

INSTALL_HINT = ("pip install nvidia-ml-py (or pip install -e '.[gpu-bench]'); it needs an NVIDIA "
                "driver (libnvidia-ml.so), so it works only on a machine with an NVIDIA GPU")
# A sample that follows a gap longer than this many periods covers one period only: the samples
# between were lost (the driver's buffer is finite), and the gap is left uncovered.
_GAP_PERIODS = 2.5


class NvmlUnavailable(RuntimeError):
    """pynvml is not installed, or NVML cannot start (no NVIDIA driver), or the GPU is unknown."""


@dataclass(frozen=True)
class Sample:
    at: float  # the end of the sample's period, seconds since the epoch
    busy: float  # percent of the period during which a kernel executed (0-100)


@dataclass(frozen=True)
class Reading:
    """What one poll of a source returned: the utilization samples it had not returned before,
    and point readings of the device."""

    samples: list[Sample]
    memory_used: int | None = None  # bytes
    sm_clock_mhz: int | None = None
    rate: float | None = None  # nvmlDeviceGetUtilizationRates' gpu percent at this poll, as a cross-check


@dataclass(frozen=True)
class Poll:
    at: float  # the host's clock when the reading came back
    memory_used: int | None
    sm_clock_mhz: int | None
    rate: float | None
    newest: float | None  # the newest sample's timestamp so far


@dataclass(frozen=True)
class Share:
    share: float | None  # busy fraction of the covered time (0-1), None when nothing was covered
    covered: float  # seconds of the windows that samples cover
    span: float  # seconds of the windows

    @property
    def coverage(self) -> float:
        return self.covered / self.span if self.span > 0 else 0.0


Window = tuple[float, float]


def merge(windows: Iterable[Window]) -> list[Window]:
    """The union of the windows, as sorted disjoint windows."""
    merged: list[list[float]] = []
    for start, end in sorted(w for w in windows if w[1] > w[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def complement(windows: Iterable[Window], start: float, end: float) -> list[Window]:
    """The parts of [start, end] outside the windows."""
    gaps, cursor = [], start
    for lo, hi in merge(windows):
        if lo > cursor:
            gaps.append((cursor, min(lo, end)))
        cursor = max(cursor, hi)
        if cursor >= end:
            break
    if cursor < end:
        gaps.append((cursor, end))
    return [(lo, hi) for lo, hi in gaps if hi > lo]


def typical_period(samples: list[Sample]) -> float | None:
    """The median time between consecutive samples (the driver's period), None with fewer than two."""
    steps = [b.at - a.at for a, b in zip(samples, samples[1:]) if b.at > a.at]
    return statistics.median(steps) if steps else None


def busy_share(samples: Iterable[Sample], windows: Iterable[Window], period: float | None = None) -> Share:
    """The time-weighted mean utilization over the union of the windows. Each sample covers
    (the previous sample's time, its own time]; the first one, and one after a gap of lost
    samples, covers one `period` (default: the typical period) back from its time."""
    ordered = sorted(samples, key=lambda s: s.at)
    spans = merge(windows)
    span = sum(hi - lo for lo, hi in spans)
    period = period or typical_period(ordered)
    if not ordered or period is None:
        return Share(None, 0.0, span)
    weighted = covered = 0.0
    previous = ordered[0].at - period
    for sample in ordered:
        lost_before = sample.at - previous > _GAP_PERIODS * period
        begins = sample.at - period if lost_before else previous
        for lo, hi in spans:
            overlap = min(sample.at, hi) - max(begins, lo)
            if overlap > 0:
                weighted += overlap * min(max(sample.busy, 0.0), 100.0) / 100.0
                covered += overlap
        previous = sample.at
    return Share(weighted / covered if covered > 0 else None, covered, span)


@dataclass
class Timeline:
    """Everything a Sampler collected: samples in time order (each once) and its polls."""

    samples: list[Sample] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    mode: str = "samples"

    def busy(self, start: float, end: float) -> Share:
        return busy_share(self.samples, [(start, end)])

    def busy_in(self, windows: Iterable[Window]) -> Share:
        return busy_share(self.samples, windows)

    def polled_rate_share(self, start: float, end: float) -> Share:
        """The same share from the utilization rates read at every poll (each covering the
        time since the poll before): a cross-check of the samples."""
        polled = [Sample(p.at, p.rate) for p in self.polls if p.rate is not None]
        return busy_share(polled, [(start, end)])

    def clock_offset(self) -> float | None:
        """Median of (poll time - newest sample's time) over the polls: about one period when
        the driver's timestamps and the host's clock agree."""
        offsets = [p.at - p.newest for p in self.polls if p.newest is not None]
        return statistics.median(offsets) if offsets else None

    def summary(self, start: float, end: float, bin_seconds: float = 10.0) -> dict:
        """The samples summarised over [start, end]: the busy share and its coverage, the
        samples' count, period and spread, the cross-check, busy share per bin, memory and SM
        clock."""
        inside = [s for s in self.samples if start <= s.at <= end]
        polls = [p for p in self.polls if start <= p.at <= end]
        whole, polled = self.busy(start, end), self.polled_rate_share(start, end)
        bins, edge = [], start
        while edge < end:
            bins.append(_rounded(self.busy(edge, min(edge + bin_seconds, end)).share))
            edge += bin_seconds
        values = sorted(s.busy for s in inside)
        return {
            "mode": self.mode,
            "busy_share": _rounded(whole.share),
            "coverage": _rounded(whole.coverage),
            "samples": len(inside),
            "period_s": _rounded(typical_period(self.samples)),
            "sample_busy_percent": _spread(values),
            "polled_rate_share": _rounded(polled.share),
            "clock_offset_s": _rounded(self.clock_offset()),
            "bin_seconds": bin_seconds,
            "busy_share_by_bin": bins,
            "memory_used_mib": _spread([p.memory_used / 2**20 for p in polls if p.memory_used is not None]),
            "sm_clock_mhz": _spread([float(p.sm_clock_mhz) for p in polls if p.sm_clock_mhz is not None]),
        }


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _spread(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"min": _rounded(min(values), 1), "median": _rounded(statistics.median(values), 1),
            "max": _rounded(max(values), 1)}


class Sampler:
    """Polls `source` every `interval` seconds in a thread until `stop`. A failure of the
    source ends the polling and is raised by `stop`."""

    def __init__(self, source: Callable[[], Reading], interval: float = 0.05,
                 clock: Callable[[], float] = time.time, mode: str | None = None):
        self.source, self.interval, self.clock = source, interval, clock
        self.timeline = Timeline(mode=mode or getattr(source, "mode", "samples"))
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._thread is not None:
            self._stopping.set()
            self._thread.join()

    def start(self) -> None:
        self.poll()  # a source that fails at once fails here, in the caller's thread
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self, until: float | None = None, settle: float = 2.5) -> Timeline:
        """Stop polling and return the timeline. With `until`: first wait (at most `settle`
        seconds) for a sample stamped at or after it, the one that covers that moment (the
        driver publishes a sample at the end of its period)."""
        limit = time.monotonic() + settle
        while until is not None and self._thread is not None and self._thread.is_alive() \
                and time.monotonic() < limit and not self._covers(until):
            time.sleep(self.interval)
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self.timeline

    def _covers(self, moment: float) -> bool:
        samples = self.timeline.samples
        return bool(samples) and samples[-1].at >= moment

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.interval):
                self.poll()
        except BaseException as exc:  # noqa: BLE001 - raised again by stop()
            self._error = exc

    def poll(self) -> None:
        reading = self.source()
        at = self.clock()
        timeline = self.timeline
        newest = timeline.samples[-1].at if timeline.samples else None
        for sample in sorted(reading.samples, key=lambda s: s.at):
            if newest is None or sample.at > newest:  # each sample once, in time order
                timeline.samples.append(sample)
                newest = sample.at
        timeline.polls.append(Poll(at, reading.memory_used, reading.sm_clock_mhz, reading.rate, newest))


# --- NVML ------------------------------------------------------------------------------------

def import_pynvml():
    """pynvml (the `nvidia-ml-py` package), or NvmlUnavailable saying how to get it."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"the GPU busy share needs NVML's Python bindings: {INSTALL_HINT}") from exc
    return pynvml


def nvml_target(device: str) -> str:
    """The NVML index or UUID of a `cuda` / `cuda:N` device. N counts within
    CUDA_VISIBLE_DEVICES when it is set, as torch counts (sandbox/device.device_model does the
    same for nvidia-smi); NVML itself ignores that variable."""
    index = device.partition(":")[2] or "0"
    if not device.startswith("cuda") or not index.isdigit():
        raise NvmlUnavailable(f"device {device!r}: the GPU busy share needs a CUDA device (cuda or cuda:N)")
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible:
        if int(index) >= len(visible):
            raise NvmlUnavailable(f"device {device!r}: CUDA_VISIBLE_DEVICES names {len(visible)} device(s)")
        return visible[int(index)]
    return index


class NvmlSource:
    """One GPU's readings through NVML; `mode` is "samples" (the driver's timestamped samples)
    or "utilization rates" (polled)."""

    def __init__(self, pynvml, handle, since: float | None = None):
        self.nvml, self.handle = pynvml, handle
        self.newest_sample_age: float | None = None  # at opening: how far the driver's clock is from ours
        self.mode = "samples" if self._probe_samples() else "utilization rates"
        # Samples from a few seconds back: the one before the first window's start gives the
        # first covered period its beginning.
        self._last_us = int(((since if since is not None else time.time()) - 5.0) * 1e6)

    def _probe_samples(self) -> bool:
        """Whether the driver keeps utilization samples for this GPU; notes how old the newest
        one it holds is (a fraction of a second when its stamps are the host's clock)."""
        try:
            _, newest_us = self._fetch(0)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) == self.nvml.NVML_ERROR_NOT_SUPPORTED:
                return False
            raise
        if newest_us is not None:
            self.newest_sample_age = round(time.time() - newest_us / 1e6, 3)
        return True

    def __call__(self) -> Reading:
        rate = float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        samples = self._samples() if self.mode == "samples" else [Sample(time.time(), rate)]
        return Reading(samples, self._memory_used(), self._sm_clock(), rate)

    def _samples(self) -> list[Sample]:
        samples, newest_us = self._fetch(self._last_us)
        if newest_us is not None:
            self._last_us = newest_us
        return samples

    def _fetch(self, after_us: int) -> tuple[list[Sample], int | None]:
        """The driver's samples stamped after `after_us` (microseconds since the epoch), and the
        newest one's stamp as the driver gave it (None when there is none)."""
        nvml = self.nvml
        try:
            kind, raw = nvml.nvmlDeviceGetSamples(self.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, after_us)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == nvml.NVML_ERROR_NOT_FOUND:
                return [], None  # no sample newer than that
            raise
        member = _VALUE_MEMBERS.get(kind, "uiVal")
        newer = [s for s in raw if s.timeStamp > after_us]
        samples = [Sample(s.timeStamp / 1e6, float(getattr(s.sampleValue, member))) for s in newer]
        return samples, max((s.timeStamp for s in newer), default=None)

    def _memory_used(self) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        except self.nvml.NVMLError:
            return None

    def _sm_clock(self) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
        except self.nvml.NVMLError:
            return None

    def describe(self) -> dict:
        """The GPU as nvidia-smi names it, the driver, and the CUDA version the driver supports."""
        nvml = self.nvml
        cuda = nvml.nvmlSystemGetCudaDriverVersion()
        return {"name": _text(nvml.nvmlDeviceGetName(self.handle)),
                "driver": _text(nvml.nvmlSystemGetDriverVersion()),
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
                "memory_total_mib": round(nvml.nvmlDeviceGetMemoryInfo(self.handle).total / 2**20),
                "utilization_source": self.mode, "newest_sample_age_s": self.newest_sample_age}


# nvmlValueType_t -> the member of c_nvmlValue_t that holds it
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_nvml(device: str = "cuda:0", since: float | None = None) -> NvmlSource:
    """NVML started and the device's source, or NvmlUnavailable saying what is missing."""
    nvml = import_pynvml()
    target = nvml_target(device)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML did not start ({exc}): {INSTALL_HINT}") from exc
    try:
        if target.isdigit():
            handle = nvml.nvmlDeviceGetHandleByIndex(int(target))
        else:
            handle = nvml.nvmlDeviceGetHandleByUUID(target)
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML knows no GPU {target!r} (device {device!r}): {exc}") from exc
    return NvmlSource(nvml, handle, since)

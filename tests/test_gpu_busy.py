"""benchmarks/gpu_busy.py, nvml_sampler.py and batch_phases.py: the GPU's busy share during a
batch and where the rest of its wall time goes.

NVML is hardware: here its samples come from scripted sources (plain functions, and a stand-in
pynvml module for NvmlSource's handling of the driver's answers); the arithmetic and the
sampler under test are the real ones. The phases come from a real CPU batch through the real
CLI. The gpu test samples a real GPU."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import batch_phases  # noqa: E402
import gpu_busy  # noqa: E402
import nvml_sampler  # noqa: E402
from nvml_sampler import NvmlUnavailable, Reading, Sample, Sampler, Timeline, busy_share  # noqa: E402

# --- the arithmetic ---------------------------------------------------------------------------


def test_each_sample_weighs_the_time_it_covers_within_the_window():
    samples = [Sample(1.0, 0.0), Sample(2.0, 100.0), Sample(3.0, 50.0), Sample(4.0, 0.0)]
    whole = busy_share(samples, [(0.0, 4.0)])
    assert whole.share == pytest.approx(0.375) and whole.coverage == pytest.approx(1.0)
    # (1, 2] at 100 % for half a second, (2, 3] at 50 % for half a second
    assert busy_share(samples, [(1.5, 2.5)]).share == pytest.approx(0.75)
    # two windows count as their union, and an overlap once
    assert busy_share(samples, [(1.0, 2.0), (1.5, 3.0), (3.0, 3.0)]).share == pytest.approx(0.75)
    # beyond the last sample nothing is covered: the share is of the covered part
    tail = busy_share(samples, [(3.5, 6.0)])
    assert tail.share == 0.0 and tail.covered == pytest.approx(0.5) and tail.coverage == pytest.approx(0.2)
    assert busy_share([], [(0.0, 1.0)]).share is None


def test_a_sample_after_lost_ones_covers_one_period_and_the_gap_stays_uncovered():
    samples = [Sample(1.0, 100.0), Sample(2.0, 100.0), Sample(3.0, 100.0), Sample(10.0, 0.0)]
    share = busy_share(samples, [(0.0, 10.0)])
    assert share.covered == pytest.approx(4.0)  # (0, 3] and (9, 10]
    assert share.share == pytest.approx(0.75)
    assert nvml_sampler.typical_period(samples) == pytest.approx(1.0)


def test_windows_merge_and_their_complement_fills_the_rest():
    assert nvml_sampler.merge([(5, 6), (1, 3), (2, 4), (7, 7)]) == [(1, 4), (5, 6)]
    assert nvml_sampler.complement([(5, 6), (1, 3), (2, 4)], 0, 10) == [(0, 1), (4, 5), (6, 10)]
    assert nvml_sampler.complement([(-1, 2), (8, 12)], 0, 10) == [(2, 8)]
    assert nvml_sampler.complement([], 0, 1) == [(0, 1)]


# --- the sampler, fed by a scripted source ----------------------------------------------------

def scripted_source(busy_from: float, busy_until: float, step: float = 0.1, repeat: bool = False):
    """The driver's samples as a function: each call publishes the next sample (every `step`
    seconds of a fixed clock from 1000.0), 100 % while inside [busy_from, busy_until) else 0;
    with `repeat`, every call returns all samples so far (the sampler keeps each once)."""
    published: list[Sample] = []

    def read() -> Reading:
        at = 1000.0 + step * (len(published) + 1)
        published.append(Sample(round(at, 6), 100.0 if busy_from < at <= busy_until else 0.0))
        return Reading(list(published) if repeat else published[-1:], memory_used=3 << 30,
                       sm_clock_mhz=1980, rate=published[-1].busy)

    return read


@pytest.mark.parametrize("repeat", [False, True])
def test_the_sampler_collects_each_sample_once_and_waits_for_the_one_covering_the_end(repeat):
    sampler = Sampler(scripted_source(1000.3, 1000.6, repeat=repeat), interval=0.001, clock=lambda: 0.0)
    sampler.start()
    timeline = sampler.stop(until=1001.0)  # the sample stamped 1001.0 covers the end
    stamps = [s.at for s in timeline.samples]
    assert stamps == sorted(set(stamps)) and stamps[-1] >= 1001.0
    assert timeline.busy(1000.0, 1001.0).share == pytest.approx(0.3)
    assert timeline.busy_in([(1000.3, 1000.6)]).share == pytest.approx(1.0)
    assert timeline.busy_in([(1000.0, 1000.3), (1000.6, 1001.0)]).share == pytest.approx(0.0)
    summary = timeline.summary(1000.0, 1001.0, bin_seconds=0.5)
    assert summary["busy_share"] == pytest.approx(0.3) and summary["coverage"] == pytest.approx(1.0)
    assert summary["period_s"] == pytest.approx(0.1) and summary["samples"] == 10
    assert summary["busy_share_by_bin"] == [pytest.approx(0.4), pytest.approx(0.2)]
    assert summary["memory_used_mib"] is None  # every poll is stamped 0.0 by the clock given, outside
    assert timeline.polled_rate_share(1000.0, 1001.0).share is None


def test_a_failing_source_stops_the_sampler_and_its_error_is_raised_by_stop():
    calls = []

    def read() -> Reading:
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError("NVML went away")
        return Reading([Sample(float(len(calls)), 10.0)])

    sampler = Sampler(read, interval=0.001)
    sampler.start()
    time.sleep(0.1)
    with pytest.raises(RuntimeError, match="NVML went away"):
        sampler.stop()
    assert len(calls) == 4


def test_polls_give_memory_clock_and_the_polled_rates_cross_check():
    now = time.time()
    timeline = Timeline(samples=[Sample(now + t, 50.0) for t in (0.5, 1.0, 1.5, 2.0)])
    for t, used, clock, rate in ((0.5, 1 << 30, 1500, 40.0), (1.0, 2 << 30, 1980, 60.0), (2.0, 3 << 30, 1755, 50.0)):
        timeline.polls.append(nvml_sampler.Poll(now + t, used, clock, rate, now + t - 0.1))
    summary = timeline.summary(now, now + 2.0)
    assert summary["memory_used_mib"] == {"min": 1024.0, "median": 2048.0, "max": 3072.0}
    assert summary["sm_clock_mhz"] == {"min": 1500.0, "median": 1755.0, "max": 1980.0}
    # rates at 0.5 (covering (0, 0.5]), 1.0 and 2.0 (covering (1.0, 2.0])
    assert summary["polled_rate_share"] == pytest.approx((0.5 * 0.4 + 0.5 * 0.6 + 1.0 * 0.5) / 2.0)
    assert summary["clock_offset_s"] == pytest.approx(0.1)


# --- NvmlSource against a stand-in of pynvml's API ----------------------------------------------

class StandInNvml:
    """pynvml's names that NvmlSource uses, answering as a driver would."""

    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_FOUND = 3, 6
    NVML_GPU_UTILIZATION_SAMPLES, NVML_CLOCK_SM = 1, 1

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(f"NVML error {value}")
            self.value = value

    def __init__(self, stamps_us: list[int] | None):
        self.stamps_us = stamps_us  # None: samples not supported
        self.asked: list[int] = []

    def nvmlDeviceGetSamples(self, handle, kind, after_us):
        self.asked.append(after_us)
        if self.stamps_us is None:
            raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        newer = [t for t in self.stamps_us if t > after_us]
        if not newer:
            raise self.NVMLError(self.NVML_ERROR_NOT_FOUND)
        return 1, [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=t % 100)) for t in newer]

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=42, memory=7)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=5 << 30, total=80 << 30)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)


def test_nvml_source_reads_new_samples_in_seconds_and_nothing_new_as_none():
    now_us = int(time.time() * 1e6)
    nvml = StandInNvml([now_us - 10_000_000, now_us - 200_000 + 17, now_us - 33])
    source = nvml_sampler.NvmlSource(nvml, handle="gpu0", since=now_us / 1e6)
    assert source.mode == "samples" and source.newest_sample_age == pytest.approx(0.0, abs=0.5)
    first = source()
    # only the samples after since - 5 s, in seconds, with their values; the rate as the cross-check
    assert [s.at for s in first.samples] == [(now_us - 200_000 + 17) / 1e6, (now_us - 33) / 1e6]
    assert [s.busy for s in first.samples] == [float((now_us - 200_000 + 17) % 100), float((now_us - 33) % 100)]
    assert first.rate == 42.0 and first.memory_used == 5 << 30 and first.sm_clock_mhz is None
    assert source().samples == []  # NOT_FOUND: nothing newer than the last one
    assert nvml.asked[-1] == now_us - 33


def test_nvml_source_polls_the_utilization_rate_where_samples_are_not_supported():
    source = nvml_sampler.NvmlSource(StandInNvml(None), handle="gpu0")
    assert source.mode == "utilization rates"
    before = time.time()
    reading = source()
    assert len(reading.samples) == 1 and reading.samples[0].busy == 42.0 and reading.samples[0].at >= before


def test_the_device_maps_to_nvml_through_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_sampler.nvml_target("cuda") == "0" and nvml_sampler.nvml_target("cuda:3") == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, GPU-8f6c")
    assert nvml_sampler.nvml_target("cuda:0") == "2" and nvml_sampler.nvml_target("cuda:1") == "GPU-8f6c"
    with pytest.raises(NvmlUnavailable, match="names 2 device"):
        nvml_sampler.nvml_target("cuda:2")
    with pytest.raises(NvmlUnavailable, match="needs a CUDA device"):
        nvml_sampler.nvml_target("cpu")


# --- without NVML -------------------------------------------------------------------------------

def test_without_pynvml_the_error_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(NvmlUnavailable, match=r"pip install nvidia-ml-py.*NVIDIA driver"):
        nvml_sampler.open_nvml("cuda:0")
    # the script stops with it before any work
    monkeypatch.setattr(sys, "argv", ["gpu_busy.py", "--count", "2"])
    with pytest.raises(SystemExit) as stopped:
        gpu_busy.main()
    assert "pip install nvidia-ml-py" in str(stopped.value.code)


def test_without_a_driver_nvml_does_not_start_and_says_why():
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install 'kernelopt[gpu-bench]')")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML starts here: this machine has an NVIDIA driver")
    with pytest.raises(NvmlUnavailable, match="NVML did not start.*needs an NVIDIA driver"):
        nvml_sampler.open_nvml("cuda:0")


# --- the phases of a real batch (the CLI on the CPU) --------------------------------------------

LOAD_FAILS = "import torch\nraise RuntimeError('this candidate fails at import')\n"


@pytest.fixture(scope="module")
def cpu_batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("candidates")
    shutil.copy(REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py", folder / "a_clamp.py")
    (folder / "b_fails.py").write_text(LOAD_FAILS)
    command = gpu_busy.eval_command(folder, "cpu", jobs=2, timing_budget=0.5,
                                    cache=tmp_path_factory.mktemp("cache"), extra=["--correctness-trials", "2"])
    return gpu_busy.run_batch(command)


def test_a_real_batch_sums_its_phases_and_places_its_judged_window(cpu_batch):
    batch = cpu_batch
    by_name = {Path(v.candidate).name: v for v in batch.verdicts}
    clamp, fails = by_name["a_clamp.py"].result, by_name["b_fails.py"].result
    assert clamp.status == "correct" and fails.status == "runtime_error"
    assert batch.started < min(v.at for v in batch.verdicts) and batch.ended <= batch.exited

    totals = {t.name: t for t in batch_phases.phase_totals([clamp, fails], batch.wall)}
    for name in ("correctness", "timing"):  # judged: the clamp candidate's only
        assert totals[name].seconds == pytest.approx(clamp.durations[name])
        assert totals[name].candidates == 1 and not totals[name].overlaps
    assert totals["load"].candidates == 2 and totals["load"].overlaps
    assert totals["load"].seconds == pytest.approx(clamp.durations["load"] + fails.durations["load"])
    assert totals["timing"].share == pytest.approx(clamp.durations["timing"] / batch.wall)
    assert "profile" not in totals  # no candidate was profiled

    windows = batch_phases.judged_windows(batch.verdicts)
    assert windows == [(by_name["a_clamp.py"].at - batch_phases.judged_seconds(clamp), by_name["a_clamp.py"].at)]
    assert batch.started < windows[0][0]

    regions = gpu_busy.regions(batch)
    assert regions["judged"] == [(max(windows[0][0], batch.started), min(windows[0][1], batch.ended))]
    seconds = {name: sum(hi - lo for lo, hi in spans) for name, spans in regions.items()}
    assert sum(seconds.values()) == pytest.approx(batch.wall)
    assert regions["before_first"] == [(batch.started, windows[0][0])]

    builds = batch_phases.build_summary([clamp, fails])
    assert builds["builds"] == 0 and builds["compile_seconds_median"] is None  # PyTorch-only candidates


def test_the_report_puts_the_busy_share_beside_the_phases(cpu_batch):
    batch = cpu_batch
    (lo, hi), = gpu_busy.regions(batch)["judged"]
    # the driver's samples every 0.1 s: busy exactly while the candidate was judged
    stamps = [batch.started + 0.1 * k for k in range(1, int(batch.wall / 0.1) + 3)]
    timeline = Timeline(samples=[Sample(t, 100.0 if lo < t <= hi else 0.0) for t in stamps])
    machine = {"gpu": {"name": "NVIDIA H100 80GB HBM3", "driver": "580.82.07", "cuda_driver": "13.0"},
               "torch": "2.13.0", "torch_cuda": "13.0", "cpus": 16, "load_average": 0.5, "python": "3.11.9",
               "commit": "abc1234"}
    settings = {"count": 2, "jobs": 2, "timing_budget": 0.5, "device": "cpu", "builds": "cold",
                "warm_pch_s": None, "interval_s": 0.05}
    report = gpu_busy.build_report(batch, timeline, machine, settings)
    judged = hi - lo
    assert report["gpu"]["busy_share"] == pytest.approx(judged / batch.wall, abs=0.1 / batch.wall)
    assert report["regions"]["judged"]["busy_share"] == pytest.approx(1.0, abs=0.1 / judged)
    assert report["regions"]["between"]["busy_share"] in (None, pytest.approx(0.0, abs=0.1))
    assert report["regions"]["before_first"]["busy_share"] == pytest.approx(0.0, abs=0.1)
    assert report["statuses"] == {"correct": 1, "runtime_error": 1}
    assert {c["status"] for c in report["per_candidate"]} == {"correct", "runtime_error"}
    assert all(c["durations"].get("total", 0) > 0 for c in report["per_candidate"])
    text = gpu_busy.markdown(report)
    assert "NVIDIA H100 80GB HBM3, driver 580.82.07 (CUDA 13.0)" in text
    assert f"**{100 * report['gpu']['busy_share']:.1f} %**" in text
    assert "| timing rounds |" in text and "no: one candidate at a time" in text


# --- a real GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_gpu_running_matmuls_is_seen_busy():
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install 'kernelopt[gpu-bench]')")
    import torch

    source = nvml_sampler.open_nvml("cuda:0")
    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    sampler = Sampler(source)
    sampler.start()
    start = time.time()
    while time.time() - start < 2.0:
        for _ in range(10):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
    end = time.time()
    timeline = sampler.stop(until=end)
    share = timeline.busy(start, end)
    assert share.share is not None and share.share > 0 and share.coverage > 0.5, timeline.summary(start, end)
    assert timeline.summary(start, end)["memory_used_mib"]["max"] > 0
    assert source.describe()["name"]

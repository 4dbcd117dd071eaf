"""The physical floor (kernelopt/sandbox/physics.py; docs/referee.md, "The physical floor"): its
arithmetic, the cached ceiling (measured once per machine, reused, measured again for another
machine, a corrupt file survived), the re-measure and the rule `faster_than_physics` in the
timing phase (synthetic phases), and end to end through the real Evaluator on the CPU: an honest
candidate's speed of light lies in (0, 1], a ceiling set between the two sides' times rejects the
faster side after a re-measure, and a ceiling below the reference's time is dropped with a note.
GPU paths run under the `gpu` marker."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import torch

from conftest import EXAMPLES
from kernelopt.sandbox import physics, rules
from kernelopt.sandbox.physics import Ceiling, Floor
from kernelopt.sandbox.results import Check, Timing, TimingStats
from kernelopt.sandbox.timing import rounds

CPU = Ceiling(bandwidth_gbs=100.0, source="measured", detail="test")


@pytest.fixture
def ceilings(tmp_path, monkeypatch):
    """A fresh cache file and an empty per-process memory of ceilings; no override."""
    path = tmp_path / "ceilings.json"
    monkeypatch.setenv(physics.CACHE_ENV, str(path))
    monkeypatch.delenv(physics.OVERRIDE_ENV, raising=False)
    monkeypatch.setattr(physics, "_known", {})
    return path


def counting_probe(monkeypatch, bandwidth: float = 50.0) -> list[str]:
    calls: list[str] = []

    def probe(device: str) -> dict:
        calls.append(device)
        return {"bandwidth_gbs": bandwidth, "detail": f"fake probe #{len(calls)}"}

    monkeypatch.setattr(physics, "probe", probe)
    return calls


# -- the arithmetic ---------------------------------------------------------------------------

def test_the_floor_is_the_bytes_at_the_ceiling_or_the_flops_at_the_peak():
    assert physics.floor_ms(10**9, CPU) == pytest.approx(10.0)  # 1 GB at 100 GB/s
    gpu = Ceiling(bandwidth_gbs=1000.0, source="datasheet", detail="x", l2_bytes=50 * 10**6, l2_gbs=4000.0)
    # The first 50 MB may come from L2 at 4 TB/s, the rest from DRAM at 1 TB/s.
    assert physics.floor_ms(10 * 10**6, gpu) == pytest.approx(10e6 / 4e12 * 1e3)
    assert physics.floor_ms(150 * 10**6, gpu) == pytest.approx((50e6 / 4e12 + 100e6 / 1e12) * 1e3)
    compute = Ceiling(bandwidth_gbs=1000.0, source="datasheet", detail="x", flops_per_s=1e12)
    assert physics.floor_ms(10**6, compute, flops=10**10) == pytest.approx(10.0)  # FLOPs bound
    assert physics.floor_ms(10**6, compute, flops=10) == pytest.approx(1e-3)  # bytes bound


def test_speed_of_light_and_the_margin():
    floor = Floor(ms=2.0, bytes=2 * 10**8, ceiling=CPU)
    assert floor.sol(4.0) == 0.5 and floor.sol(2.0) == 1.0 and floor.sol(0.0) is None
    assert not floor.impossible(1.5) and not floor.impossible(2.0 / physics.RULE_MARGIN)
    assert floor.impossible(2.0 / physics.RULE_MARGIN * 0.99)
    assert "200 MB at 100 GB/s" in floor.basis() and "measured" in floor.basis()


def test_the_rule_fires_only_below_the_floor_by_the_margin():
    floor = Floor(ms=3.0, bytes=3 * 10**8, ceiling=CPU)
    assert rules.faster_than_physics(2.5, floor, 2) is None
    assert rules.faster_than_physics(1.0, None, 2) is None
    verdict = rules.faster_than_physics(1.0, floor, 2)
    assert verdict is not None and verdict.status == "rejected" and verdict.flags == ("faster_than_physics",)
    assert "1 ms" in verdict.message and "3 ms" in verdict.message and "300 MB at 100 GB/s" in verdict.message


# -- the ceiling and its cache ------------------------------------------------------------------

def test_the_ceiling_is_measured_once_then_read_from_the_file(ceilings, monkeypatch):
    calls = counting_probe(monkeypatch)
    first = physics.ceiling_for("cpu", None)
    assert first is not None and first.bandwidth_gbs == 50.0 and first.source == "measured"
    assert calls == ["cpu"]
    stored = json.loads(ceilings.read_text())
    assert list(stored.values()) == [{"bandwidth_gbs": 50.0, "detail": "fake probe #1"}]
    monkeypatch.setattr(physics, "_known", {})  # a new process: only the file remains
    assert physics.ceiling_for("cpu", None) == first and calls == ["cpu"]
    floor = physics.floor_for("cpu", None, 5 * 10**7)
    assert floor is not None and floor.ms == pytest.approx(1.0) and calls == ["cpu"]


def test_another_machine_is_measured_again_and_both_are_kept(ceilings, monkeypatch):
    calls = counting_probe(monkeypatch)
    physics.ceiling_for("cpu", None)
    monkeypatch.setattr(physics, "machine_key", lambda device, device_name=None: "another-machine")
    monkeypatch.setattr(physics, "_known", {})
    physics.ceiling_for("cpu", None)
    assert len(calls) == 2 and len(json.loads(ceilings.read_text())) == 2


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"KEY": {"bandwidth_gbs": -3}}',
                                     '{"KEY": {"bandwidth_gbs": "fast"}}'])
def test_a_corrupt_cache_is_measured_again_and_rewritten(ceilings, monkeypatch, content):
    key = physics.machine_key("cpu")
    ceilings.write_text(content.replace("KEY", key))
    calls = counting_probe(monkeypatch, bandwidth=70.0)
    assert physics.ceiling_for("cpu", None).bandwidth_gbs == 70.0 and calls == ["cpu"]
    assert json.loads(ceilings.read_text())[key]["bandwidth_gbs"] == 70.0


def test_the_machine_key_names_the_machine_torch_and_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    one = physics.machine_key("cpu")
    assert one == physics.machine_key("cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert physics.machine_key("cpu") != one
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    assert physics.machine_key("cpu") != one


def test_a_failed_probe_gives_no_floor_and_writes_nothing(ceilings, monkeypatch):
    monkeypatch.setattr(physics, "probe", lambda device: None)
    assert physics.floor_for("cpu", None, 10**6) is None and not ceilings.exists()


def test_the_override_names_the_ceiling_and_a_bad_one_is_an_error(ceilings, monkeypatch):
    calls = counting_probe(monkeypatch)
    monkeypatch.setenv(physics.OVERRIDE_ENV, "0.5")
    found = physics.ceiling_for("cpu", None)
    assert found is not None and found.bandwidth_gbs == 0.5 and found.source == "override" and calls == []
    monkeypatch.setenv(physics.OVERRIDE_ENV, "-1")
    with pytest.raises(ValueError, match=physics.OVERRIDE_ENV):
        physics.ceiling_for("cpu", None)


def test_the_real_probe_measures_this_cpu_within_seconds(ceilings):
    begin = time.monotonic()
    found = physics.probe("cpu")
    assert found is not None and 0.5 < found["bandwidth_gbs"] < 10_000
    assert time.monotonic() - begin < 30  # a second of measuring, plus torch's import


# -- the timing phase: re-measure, reject, drop a wrong floor ---------------------------------

def _timing(reference_ms: float, candidate_ms: float) -> Timing:
    stats = TimingStats(samples=10, median_ms=1, mean_ms=1, std_ms=0, min_ms=1, max_ms=1, p25_ms=1, p75_ms=1,
                        rel_iqr=0)
    return Timing(method="test", reference=stats, candidate=stats, rounds=3, calls_per_round=3,
                  reference_ms=reference_ms, candidate_ms=candidate_ms, speedup_precision=0.05)


def _measure(monkeypatch, phases: list[Timing], floor: Floor | None,
             checks: list[Check] | None = None) -> tuple[Timing, int, list[Check]]:
    """rounds.measure over synthetic timing phases; (its result, the phases it ran, its checks)."""
    queue = list(phases)
    monkeypatch.setattr(rounds, "timing_phase", lambda timer, checks: queue.pop(0))
    timer = SimpleNamespace(options=SimpleNamespace(outlier_speedup=10.0, precision_policy="flag"), floor=floor,
                            dependence=SimpleNamespace(verdict=lambda: None), compared=0,
                            reduced_precision_calls=0, findings=rules.Findings())
    checks = [] if checks is None else checks
    result = rounds.measure(timer, checks)  # type: ignore[arg-type]
    return result, len(phases) - len(queue), checks


def test_a_time_below_the_floor_twice_is_rejected(monkeypatch):
    floor = Floor(ms=1.0, bytes=10**8, ceiling=CPU)
    checks: list[Check] = []
    with pytest.raises(rules.VerdictReached) as reached:
        _measure(monkeypatch, [_timing(2.0, 0.1), _timing(2.0, 0.2)], floor, checks)
    assert reached.value.verdict.rule == "faster_than_physics" and "2 measurement(s)" in reached.value.message
    assert "0.2 ms" in reached.value.message  # the slower of the two is the one judged
    assert [c.name for c in checks][-1] == "above_physical_floor" and not checks[-1].passed


def test_a_time_below_the_floor_once_is_re_measured_and_believed_when_it_holds(monkeypatch):
    floor = Floor(ms=1.0, bytes=10**8, ceiling=CPU)
    result, ran, checks = _measure(monkeypatch, [_timing(4.0, 0.5), _timing(4.0, 0.8)], floor)
    assert ran == 2 and result.remeasured and result.candidate_ms == 0.8  # the lower speedup is kept
    assert result.floor_ms == 1.0 and result.candidate_sol == pytest.approx(1.25)
    assert result.reference_sol == pytest.approx(0.25) and result.floor_source == "measured"
    assert checks[-1].name == "above_physical_floor" and checks[-1].passed


def test_a_time_above_the_floor_is_measured_once_and_carries_both_sides_sol(monkeypatch):
    floor = Floor(ms=0.5, bytes=5 * 10**7, ceiling=CPU)
    result, ran, _ = _measure(monkeypatch, [_timing(4.0, 2.0)], floor)
    assert ran == 1 and not result.remeasured
    assert (result.reference_sol, result.candidate_sol) == (0.125, 0.25) and result.floor_bytes == 5 * 10**7
    assert result.floor_bandwidth_gbs == 100.0 and "50 MB at 100 GB/s" in (result.floor_basis or "")


def test_a_reference_below_the_floor_drops_the_floor_never_the_candidate(monkeypatch):
    floor = Floor(ms=10.0, bytes=10**9, ceiling=CPU)
    result, ran, checks = _measure(monkeypatch, [_timing(4.0, 1.0)], floor)  # both below: not re-measured
    assert ran == 1 and result.floor_ms is None and result.candidate_sol is None and result.reference_sol is None
    assert "the reference measured 4 ms per call, below the physical floor" in (result.floor_note or "")
    assert checks[-1].detail == result.floor_note
    # In the re-measure of an outlier: the reference below the floor there drops it too.
    result, ran, _ = _measure(monkeypatch, [_timing(40.0, 2.0), _timing(5.0, 0.1)], floor)
    assert ran == 2 and result.floor_ms is None and result.floor_note


def test_without_a_ceiling_nothing_changes(monkeypatch):
    result, ran, checks = _measure(monkeypatch, [_timing(2.0, 1.0)], None)
    assert ran == 1 and result.floor_ms is None and result.floor_note is None
    assert checks[-1].detail == "no ceiling known"


def test_the_speed_of_light_line_names_both_sides_and_the_floor(monkeypatch):
    floor = Floor(ms=0.5, bytes=5 * 10**7, ceiling=CPU)
    result, _, _ = _measure(monkeypatch, [_timing(4.0, 2.0)], floor)
    assert physics.sol_text(result) == ("speed of light: candidate 25.0%, reference 12.5% (the physical floor over "
                                        "the mean time per call; floor 0.5 ms: 50 MB at 100 GB/s, measured)")
    assert physics.sol_text(_timing(4.0, 2.0)) is None and physics.sol_text(None) is None


def test_a_verdict_over_several_configurations_keeps_the_geometric_mean_and_no_sizes(monkeypatch):
    floors = [Floor(ms=1.0, bytes=10**8, ceiling=CPU), Floor(ms=4.0, bytes=4 * 10**8, ceiling=CPU)]
    each = [_measure(monkeypatch, [_timing(ref, cand)], floor)[0]
            for (ref, cand), floor in zip([(4.0, 2.0), (16.0, 8.0)], floors)]
    combined = each[0].model_copy(deep=True)
    combined.reference_ms, combined.candidate_ms = 8.0, 4.0  # what shaped.py sets: the geometric means
    physics.combined_floor(combined, each)
    assert combined.floor_ms == pytest.approx(2.0) and combined.floor_bytes is None
    assert combined.candidate_sol == pytest.approx(0.5) and combined.reference_sol == pytest.approx(0.25)
    assert "geometric mean of 2" in (combined.floor_basis or "")
    assert "100 MB" not in (physics.sol_text(combined) or "") and "MB" not in (physics.sol_text(combined) or "")
    each[1].floor_ms, each[1].floor_note = None, "the reference measured below"
    physics.combined_floor(combined, each)
    assert combined.floor_ms is None and combined.candidate_sol is None and combined.floor_note


# -- end to end, the real Evaluator on the CPU --------------------------------------------------

def _copy(problem: str) -> str:
    return (EXAMPLES / problem).read_text().replace("class Model(", "class ModelNew(")


def test_honest_candidates_are_correct_with_a_speed_of_light_within_one(monkeypatch, tmp_path):
    from kernelopt.agent.prompting import feedback_text
    from kernelopt.cli.evaluate import summary_text
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import EvalOptions, Evaluator

    monkeypatch.delenv(physics.OVERRIDE_ENV, raising=False)
    problem = load_problem(EXAMPLES / "1_ReLU.py")
    with Evaluator(problem, EvalOptions(device="cpu", timing_budget=1.5, min_timed_calls=5)) as evaluator:
        result = evaluator.evaluate(_copy("1_ReLU.py"))
    assert result.status == "correct", result.message
    t = result.timing
    assert t is not None and t.floor_source == "measured" and t.floor_bytes == 2 * 256 * 4096 * 4
    assert t.floor_ms == pytest.approx(t.floor_bytes / (t.floor_bandwidth_gbs * 1e9) * 1e3)
    assert 0 < t.candidate_sol <= 1 and 0 < t.reference_sol <= 1
    assert any(c.name == "above_physical_floor" and c.passed for c in result.checks)
    assert "speed of light: candidate" in summary_text(result)
    assert "speed of light: candidate" in feedback_text(result)
    assert json.loads(result.model_dump_json())["timing"]["candidate_sol"] == t.candidate_sol


WASTEFUL = """import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"ReLU after dead work: forty 256 x 256 products whose result is thrown away.\"\"\"

    def forward(self, x):
        w = x[:256, :256]
        for _ in range(40):
            w = torch.tanh(w @ w.t())
        return torch.relu(x)


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return []
"""
RELU_ONLY = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


def test_the_rule_fires_end_to_end_and_a_wrong_floor_is_dropped(monkeypatch, tmp_path):
    """One Evaluator on a reference that wastes forty products before its ReLU, and an honest
    candidate that skips them (tens of times faster): measured normally, then with the ceiling
    set so that the floor lies between the two sides' times (the candidate is rejected after a
    re-measure), then with a ceiling so low that the reference itself is below its floor (the
    floor is dropped)."""
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import EvalOptions, Evaluator

    monkeypatch.delenv(physics.OVERRIDE_ENV, raising=False)
    (tmp_path / "wasteful_relu.py").write_text(WASTEFUL)
    problem = load_problem(tmp_path / "wasteful_relu.py")
    with Evaluator(problem, EvalOptions(device="cpu", timing_budget=1.5, min_timed_calls=5)) as evaluator:
        honest = evaluator.evaluate(RELU_ONLY)
        assert honest.status == "correct", honest.message
        t = honest.timing
        assert t is not None and t.floor_bytes == 2 * 512 * 1024 * 4 and t.reference_ms > 6 * t.candidate_ms, t
        assert 0 < t.candidate_sol <= 1
        # A floor at the geometric mean of the reference's time and the margin times the
        # candidate's: the reference stays above it, the candidate below it by more than the margin
        # (each by a factor of 2 or more).
        floor_ms = (t.reference_ms * physics.RULE_MARGIN * t.candidate_ms) ** 0.5
        monkeypatch.setenv(physics.OVERRIDE_ENV, repr(t.floor_bytes / (floor_ms / 1e3) / 1e9))
        rejected = evaluator.evaluate(RELU_ONLY)
        assert rejected.status == "rejected" and rejected.rules == ["faster_than_physics"], rejected.message
        assert rejected.flags == ["faster_than_physics"] and "2 measurement(s)" in rejected.message
        assert "override" in rejected.message
        # A ceiling far below anything real: the reference is below its floor, so the floor is wrong.
        monkeypatch.setenv(physics.OVERRIDE_ENV, "0.0001")
        dropped = evaluator.evaluate(RELU_ONLY)
    assert dropped.status == "correct", dropped.message
    assert dropped.timing is not None and dropped.timing.floor_ms is None and dropped.timing.candidate_sol is None
    assert dropped.timing.floor_note and dropped.warnings[0] == dropped.timing.floor_note  # (then a busy host's)


# -- GPU ------------------------------------------------------------------------------------------

def test_a_known_gpu_takes_the_datasheet_and_an_l2_allowance_without_touching_the_gpu(ceilings, monkeypatch):
    calls = counting_probe(monkeypatch)
    found = physics.ceiling_for("cuda:0", "NVIDIA H100 80GB HBM3")
    assert found == Ceiling(bandwidth_gbs=3350.0, source="datasheet", detail="NVIDIA H100 80GB HBM3, DRAM",
                            l2_bytes=60 * 10**6, l2_gbs=3350.0 * physics.L2_FACTOR)
    assert calls == []
    # 1 GB: 60 MB at four times the DRAM's bandwidth, the rest at the DRAM's.
    floor = physics.floor_for("cuda:0", "NVIDIA H100 80GB HBM3", 10**9)
    assert floor is not None and floor.ms == pytest.approx((60e6 / (4 * 3350e9) + 940e6 / 3350e9) * 1e3)


def test_an_unknown_gpu_is_measured_once_with_its_l2_and_keyed_by_its_name(ceilings, monkeypatch):
    calls: list[str] = []

    def probe(device: str) -> dict:
        calls.append(device)
        return {"bandwidth_gbs": 500.0, "l2_bytes": 8 * 10**6, "detail": "a copy"}

    monkeypatch.setattr(physics, "probe", probe)
    found = physics.ceiling_for("cuda:0", "Imaginary GPU 9000")
    assert found == Ceiling(bandwidth_gbs=500.0, source="measured", detail="a copy", l2_bytes=8 * 10**6,
                            l2_gbs=500.0 * physics.L2_FACTOR)
    assert physics.ceiling_for("cuda:0", "Imaginary GPU 9000") == found and calls == ["cuda:0"]
    physics.ceiling_for("cuda:0", "Another GPU")
    assert calls == ["cuda:0", "cuda:0"] and len(json.loads(ceilings.read_text())) == 2


@pytest.mark.gpu
def test_the_l2_table_bounds_this_gpus_l2():
    name = torch.cuda.get_device_name(0)
    bound = physics.hardware.l2_bytes(name)
    if bound is None:
        pytest.skip(f"{name} is not in the L2 table")
    assert torch.cuda.get_device_properties(0).L2_cache_size <= bound


@pytest.mark.gpu
def test_the_gpu_probe_measures_a_copy_below_the_datasheet(ceilings):
    found = physics.probe("cuda:0")
    assert found is not None and found["bandwidth_gbs"] > 50
    assert found["l2_bytes"] == torch.cuda.get_device_properties(0).L2_cache_size
    peaks = physics.hardware.peak_figures(torch.cuda.get_device_name(0))
    if peaks is not None:  # a measured copy never beats the datasheet's DRAM figure
        assert found["bandwidth_gbs"] < peaks["bandwidth_tbs"] * 1e3 * 1.05


@pytest.mark.gpu
def test_an_honest_gpu_candidate_is_within_its_floor(monkeypatch):
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import EvalOptions, evaluate

    monkeypatch.delenv(physics.OVERRIDE_ENV, raising=False)
    result = evaluate(load_problem(EXAMPLES / "1_ReLU.py"), _copy("1_ReLU.py"),
                      EvalOptions(device="cuda", timing_budget=2))
    assert result.status == "correct", result.message
    t = result.timing
    assert t is not None and t.floor_ms is not None and 0 < t.candidate_sol <= 1 and 0 < t.reference_sol <= 1


def test_a_busy_host_is_named_in_the_verdict(monkeypatch):
    from kernelopt.sandbox import device

    monkeypatch.setattr(device.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setattr(device.os, "cpu_count", lambda: 2)
    assert "load average 9.0 on 2 cores" in device.busy_host_warning()
    monkeypatch.setattr(device.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert device.busy_host_warning() is None

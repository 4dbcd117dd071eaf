"""Profile-guided feedback (--profile): the advisory profiling pass after a correct verdict, its
table, and what it never changes (status, speedup). Real evaluations on the CPU; the GPU case
(kernels, Nsight Compute) is gpu-marked."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

from kernelopt.cli.evaluate import summary_text
from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, EvalResult, Evaluator
from kernelopt.sandbox import profiling
from kernelopt.sandbox.results import Profile, ProfileRow, SideProfile

LINEAR_GELU = REPO / "examples/level1/2_LinearGELU.py"
RELU = REPO / "examples/level1/1_ReLU.py"
M, K, N = 128, 512, 256  # 2_LinearGELU: batch, in_features, out_features

RELU_PROGRAM = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
{body}
"""
CLAMP = RELU_PROGRAM.format(body="        return torch.clamp_min(x, 0.0)")
WRONG = RELU_PROGRAM.format(body="        return torch.abs(x)")
# Honest when timed, broken only under a profiler: the verdict must not notice.
FAILS_WHEN_PROFILED = RELU_PROGRAM.format(body=(
    "        if torch.autograd._profiler_enabled():\n"
    "            raise RuntimeError('no profiling here')\n"
    "        return torch.relu(x)"))
EXITS_WHEN_PROFILED = RELU_PROGRAM.format(body=(
    "        if torch.autograd._profiler_enabled():\n"
    "            import os\n"
    "            os._exit(3)\n"
    "        return torch.maximum(x, torch.zeros_like(x))"))
QUICK = dict(device="cpu", timing_budget=1.0, min_timed_calls=5, correctness_trials=2, timeout=120)


def kernelopt(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("kernelopt", path=str(Path(sys.executable).parent)) or "kernelopt"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def names(side: dict) -> list[str]:
    return [row["name"] for row in side["rows"]]


def test_eval_profile_json_on_cpu_shows_where_the_time_goes_and_the_roofline():
    run = kernelopt("eval", "--reference", str(LINEAR_GELU), "--candidate",
                    "examples/candidates/2_LinearGELU/addmm_gelu.py", "--profile", "--json", "--device", "cpu",
                    "--timing-budget", "1", "--correctness-trials", "2")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)  # still exactly one JSON document
    assert result["status"] == "correct" and result["speedup"] > 0
    profile = result["profile"]
    assert profile["device"] == "cpu" and profile["notes"] == []
    for side, ms in (("reference", result["reference_ms"]), ("candidate", result["candidate_ms"])):
        found = profile[side]
        assert found["unit"] == "op" and found["iterations"] >= 1 and found["total_ms"] > 0
        # The matmul is most of the time; GELU is a few per cent, in the top five or in "other"
        # (on a busy machine a preempted tiny op's self time can outgrow it).
        assert "aten::addmm" in names(found) and ("aten::gelu" in names(found) or "other" in names(found))
        assert sum(row["share"] for row in found["rows"]) == pytest.approx(1.0, abs=0.01)
        assert sum(row["ms"] for row in found["rows"]) == pytest.approx(found["total_ms"], rel=0.01)
        addmm = next(row for row in found["rows"] if row["name"] == "aten::addmm")
        assert addmm["calls"] == 1.0  # one matmul per forward
        assert found["measured_ms"] == pytest.approx(ms)  # the verdict's own mean times
        assert found["gflops"] == pytest.approx(2 * M * N * K / (ms * 1e-3) / 1e9)
        assert found["speed_of_light"] is None  # no peak figures for a CPU
    line = profile["roofline"]
    assert line["flops"] == 2 * M * N * K
    assert line["bytes"] == 4 * (M * K + M * N + N * K + N)  # input, output, weight, bias: once each
    assert line["precision"] == "fp32" and line["bound_ms"] is None
    assert result["durations"]["profile"] > 0
    text = summary_text(EvalResult.model_validate(result))  # what eval prints without --json
    assert "aten::addmm" in text and f"{2 * M * N * K / 1e6:.4g} MFLOP" in text and "GFLOP/s" in text


def test_only_correct_candidates_are_profiled_and_a_broken_profile_leaves_the_verdict():
    problem = load_problem(RELU)
    with Evaluator(problem, EvalOptions(profile=True, **QUICK)) as evaluator:
        wrong = evaluator.evaluate(WRONG)
        first = evaluator.evaluate(CLAMP)
        raising = evaluator.evaluate(FAILS_WHEN_PROFILED)
        exiting = evaluator.evaluate(EXITS_WHEN_PROFILED)
        used = {w.serial: w.reference_pid for w in evaluator.workers_used}
    assert wrong.status == "incorrect" and wrong.profile is None
    assert first.status == "correct" and first.profile is not None and first.profile.notes == []
    assert "aten::clamp_min" in [row.name for row in first.profile.candidate.rows]
    assert "aten::relu" in [row.name for row in first.profile.reference.rows]
    assert first.profile.roofline.flops == 0  # no matmul: nothing the flop counter counts
    assert first.profile.roofline.bytes == 2 * 256 * 4096 * 4
    for result in (raising, exiting):  # the verdict stands, the profile says what went wrong
        assert result.status == "correct" and result.speedup is not None and result.timing is not None
        assert result.profile.candidate is None and result.profile.reference is not None
        assert any(note.startswith("candidate not profiled") for note in result.profile.notes)
    assert "no profiling here" in " ".join(raising.profile.notes)
    # The reference's part is made once and reused; the worker it ran in is replaced.
    assert raising.profile.reference.rows == first.profile.reference.rows
    assert raising.profile.reference.measured_ms == pytest.approx(raising.reference_ms)
    assert used[1] != used[2] and used[2] == used[3]


def test_the_candidates_reply_is_checked_capped_and_its_notes_kept():
    notes: list[str] = []
    bad = {"unit": "op", "total_ms": -1.0, "iterations": 1, "rows": []}
    assert profiling.side_profile(bad, "candidate", notes) is None
    assert profiling.side_profile({"unit": "flop", "total_ms": 1, "iterations": 1}, "candidate", notes) is None
    assert profiling.side_profile({"rows": "nonsense"}, "candidate", notes) is None
    rows = [{"name": "k" * 500, "share": 0.1, "calls": 1, "ms": 0.1}] * 50
    side = profiling.side_profile({"unit": "kernel", "total_ms": 5.0, "iterations": 2, "rows": rows,
                                   "notes": ["x" * 1000]}, "candidate", notes)
    assert len(side.rows) == profiling.MAX_ROWS and len(side.rows[0].name) == profiling.NAME_CHARS
    assert len(notes) == 4 and "malformed" in notes[1] and len(notes[-1]) < 400
    escape = {"name": "\x1b]0;owned\x07kernel\n", "share": 1.0, "calls": 1, "ms": 1.0}  # terminal escapes
    side = profiling.side_profile({"unit": "kernel", "total_ms": 1.0, "iterations": 1, "rows": [escape],
                                   "notes": ["\x1b[2Jcleared"]}, "candidate", notes)
    assert side.rows[0].name == "?]0;owned?kernel?" and notes[-1] == "candidate: ?[2Jcleared"


def test_roofline_on_a_known_gpu_gives_the_speed_of_light_and_the_table_shows_it():
    reply = {"flops": 2 * 4096 ** 3, "bytes": 3 * 4096 * 4096 * 4, "precision": "fp32"}
    line = profiling.roofline(reply, "cuda:0", "NVIDIA H100 80GB HBM3")
    assert (line.peak_tflops, line.peak_tbs) == (67, 3.35)
    compute_s, memory_s = reply["flops"] / 67e12, reply["bytes"] / 3.35e12
    assert line.bound_ms == pytest.approx(max(compute_s, memory_s) * 1e3)
    assert profiling.roofline(reply, "cuda:0", "Some Future GPU").bound_ms is None  # no guessed peaks
    rows = [ProfileRow(name="void gemm_kernel<float>(float*)", share=0.9, calls=1, ms=2.7),
            ProfileRow(name="void at::native::(anonymous namespace)::relu_kernel<4>(int)", share=0.05, calls=1,
                       ms=0.15), ProfileRow(name="other", share=0.05, calls=2, ms=0.15)]
    side = SideProfile(unit="kernel", total_ms=3.0, iterations=10, rows=rows)
    profiling.attach_metrics(side.rows, {"gemm_kernel": {"dram": 12.0, "sm": 81.5, "occupancy": 25.0},
                                         "void at::native::relu_kernel<4>(int)": {"dram": 90.0}})
    assert [row.metrics for row in side.rows[1:]] == [{"dram": 90.0}, {}]
    profiling.with_rates(side, 4.0, line)
    assert side.speed_of_light == pytest.approx(line.bound_ms / 4.0)
    text = profiling.table(Profile(device="cuda:0", candidate=side, roofline=line, notes=["a note"]))
    assert "90.0%" in text and "gemm_kernel" in text and "[DRAM 12%, SM 82%, occupancy 25% of peak]" in text
    assert f"{side.speed_of_light:.1%} of speed of light" in text and "device peak 67 TFLOP/s FP32, 3.35 TB/s" in text
    assert text.splitlines()[-1] == "note: a note"


def test_nsight_compute_csv_becomes_metrics_per_kernel():
    from kernelopt.sandbox.worker.profiling import NCU_METRICS, parse_ncu_csv

    header = '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    lines = ["==PROF== Connected to process 7", header]
    for launch, (dram, sm) in enumerate(((80.0, 10.0), (70.0, 20.0))):
        lines.append(f'"{launch}","7","relu_kernel","{NCU_METRICS["dram"]}","%","{dram}"')
        lines.append(f'"{launch}","7","relu_kernel","{NCU_METRICS["sm"]}","%","{sm}"')
    lines.append(f'"2","7","gemm","{NCU_METRICS["occupancy"]}","%","1,234.5"')
    assert parse_ncu_csv("\n".join(lines)) == {"relu_kernel": {"dram": 75.0, "sm": 15.0},
                                               "gemm": {"occupancy": 1234.5}}
    assert parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM") == {}


def test_the_flop_count_is_the_flop_counters():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kernelopt.sandbox.worker.profiling import count_flops

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 14 * 14, 10))
    x = torch.randn(2, 3, 16, 16)
    with FlopCounterMode(display=False) as counter:
        model(x)
    assert count_flops(model, [x]) == counter.get_total_flops() > 0


def test_the_agents_strategies_profile_by_default_unless_told_not_to():
    from kernelopt.agent.strategies import with_eval_defaults

    for name in ("refine", "tree", "evolve"):
        assert with_eval_defaults(name, {})["profile"] is True
        assert with_eval_defaults(name, {"profile": False})["profile"] is False
    assert with_eval_defaults("best-of-n", {"timeout": 5}) == {"profile": False, "timeout": 5}


@pytest.mark.gpu
def test_gpu_profile_names_kernels_and_nsight_compute_metrics_where_permitted(tmp_path):
    problem = load_problem(RELU)
    options = EvalOptions(profile=True, **{**QUICK, "device": "cuda"})
    with Evaluator(problem, options) as evaluator:
        result = evaluator.evaluate(CLAMP)
    assert result.status == "correct"
    profile = result.profile
    assert profile.candidate.unit == "kernel" and profile.candidate.rows
    assert sum(row.share for row in profile.candidate.rows) == pytest.approx(1.0, abs=0.01)
    assert all(math.isfinite(row.ms) for row in profile.reference.rows)
    if profile.roofline.peak_tbs:  # a GPU of the datasheet table
        assert 0 < profile.candidate.speed_of_light <= 1.5
    from kernelopt.sandbox.worker.profiling import find_ncu

    metrics = [row.metrics for side in (profile.reference, profile.candidate) for row in side.rows if row.metrics]
    if find_ncu() is None or any("ERR_NVGPUCTRPERM" in note or "ncu" in note for note in profile.notes):
        assert any("Nsight Compute" in note for note in profile.notes)  # said why, and the verdict stands
    else:
        assert metrics and all(0 <= value <= 100 for found in metrics for value in found.values())


SOFTMAX = REPO / "examples/level1/4_RedundantSoftmax.py"
SOFTMAX_PROGRAM = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim={dim})
"""


def test_the_refine_prompt_after_a_correct_candidate_shows_the_device_and_the_profile(monkeypatch, capsys, tmp_path):
    """Through the real agent: optimize (refine, profiling by default) against the scripted LLM
    server; the second request is the refine prompt on the first, correct, candidate."""
    from llm_server import ScriptedLLMServer

    from kernelopt.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("KERNELOPT_MODEL", raising=False)
    store = tmp_path / "runs.sqlite"
    script = [f"```python\n{SOFTMAX_PROGRAM.format(dim=-1)}```", f"```python\n{SOFTMAX_PROGRAM.format(dim=1)}```"]
    with ScriptedLLMServer(script) as server:
        code = main(["optimize", str(SOFTMAX), "--model", "test-model", "--base-url", server.url, "--store",
                     str(store), "--json", "--device", "cpu", "--timing-budget", "1", "--correctness-trials", "2",
                     "--budget", "2"])
        requests = list(server.requests)
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    system, user = (message["content"] for message in requests[1]["messages"])
    assert "The hardware your code is timed on:" in system and "ONE CPU thread" in system
    assert "Where its time goes" not in requests[0]["messages"][1]["content"]  # nothing judged yet
    assert "It is correct." in user and "Where its time goes" in user
    profile_part = user.split("Where its time goes", 1)[1]
    assert "reference:" in profile_part and "candidate:" in profile_part and "aten::mm" in profile_part
    assert "softmax" in profile_part and f"{2 * 2048 * 2048 * 64 / 1e6:.4g} MFLOP" in profile_part  # x.t() @ x

    assert main(["runs", "show", summary["run_id"], "--store", str(store)]) == 0
    shown = capsys.readouterr().out
    assert "ms per forward in CPU ops" in shown and "aten::mm" in shown
    assert main(["runs", "show", summary["run_id"], "--store", str(store), "--json"]) == 0
    candidates = json.loads(capsys.readouterr().out)["candidates"]
    assert candidates[0]["profile"]["roofline"]["flops"] == 2 * 2048 * 2048 * 64


def test_the_report_shows_each_problems_profile(tmp_path, capsys):
    from test_report import problem_set, verdict, write_run

    from kernelopt.cli import main

    problems = problem_set(tmp_path, [(1, 1, "ReLU"), (1, 2, "Tanh")])
    line = profiling.roofline({"flops": 0, "bytes": 8 << 20, "precision": "fp32"}, "cuda:0", "NVIDIA H100 80GB HBM3")
    sides = []
    for name, ms in (("void at::native::vectorized_elementwise_kernel<relu>(int)", 0.02), ("relu_kernel", 0.005)):
        side = SideProfile(unit="kernel", total_ms=ms, iterations=10,
                           rows=[ProfileRow(name=name, share=0.97, calls=1, ms=ms), ProfileRow(
                               name="other", share=0.03, calls=1, ms=0.0001)])
        profiling.with_rates(side, ms * 1.2, line)
        sides.append(side)
    profile = Profile(device="cuda:0", reference=sides[0], candidate=sides[1], roofline=line,
                      notes=["Nsight Compute (ncu) not found: no per-kernel throughput metrics"])
    records = [dict(verdict(1, 1, 0, "correct", 4.0), profile=profile.model_dump()), verdict(1, 2, 0, "incorrect")]
    write_run(tmp_path / "run", problems, records, "solutions")
    assert main(["report", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "## Profiles" in markdown
    row = next(r for r in markdown.splitlines() if r.startswith("| 1 | 1 | ReLU |") and "relu_kernel" in r)
    assert "relu_kernel (97%)" in row and "vectorized_elementwise_kernel" in row
    assert f"{sides[1].speed_of_light:.1%} of speed of light" in row and "ncu) not found" in row
    assert not any(r.startswith("| 1 | 2 | Tanh |") and "speed of light" in r for r in markdown.splitlines())
    html = (tmp_path / "run" / "report.html").read_text()
    assert "Profiles" in html and "relu_kernel (97%)" in html


def test_nsight_computes_child_loads_the_same_model_the_worker_judged(tmp_path):
    """The process ncu would start (run here without ncu, on the CPU): the problem and the
    candidate from their files, the model from the init seed, the inputs the worker saved."""
    import torch

    from kernelopt.sandbox.worker.profiling import child_command

    candidate = tmp_path / "candidate.py"
    candidate.write_text(CLAMP)
    torch.save([torch.randn(3, 5)], tmp_path / "inputs.pt")
    for extra in ({}, {"candidate_path": str(candidate)}):
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"device": "cpu", "init_seed": 42, "problem_path": str(RELU),
                                    "inputs_path": str(tmp_path / "inputs.pt"), "delivered": {}, **extra}))
        done = subprocess.run(child_command(str(spec)), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stderr.strip().splitlines()[-1])
        assert said == {"profiled": extra.get("candidate_path", str(RELU)), "outputs": [[3, 5]]}


def test_doctor_says_whether_nsight_compute_can_add_its_metrics(tmp_path, monkeypatch):
    from kernelopt.sandbox import doctor

    assert doctor._check_nsight_compute(doctor.Report()).detail.startswith("no GPU")
    with_gpu = doctor.Report(gpus=[{"index": 0, "name": "NVIDIA H100 80GB HBM3"}])
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("glob.glob", lambda pattern: [])  # no toolkit or standalone ncu either
    missing = doctor._check_nsight_compute(with_gpu)
    assert not missing.ok and not missing.required and "nsight-compute" in missing.fix
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    params = tmp_path / "params"
    params.write_text("RmProfilingAdminOnly: 0\n")
    assert doctor._check_nsight_compute(with_gpu, str(params)).ok
    params.write_text("RmProfilingAdminOnly: 1\n")
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 1000)  # a user, not root
    restricted = doctor._check_nsight_compute(with_gpu, str(params))
    assert not restricted.ok and "ERR_NVGPUCTRPERM" in restricted.detail
    assert "NVreg_RestrictProfilingToAdminUsers=0" in restricted.fix
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 0)
    assert doctor._check_nsight_compute(with_gpu, str(params)).ok  # root may read the counters

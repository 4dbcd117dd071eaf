"""`kernelopt bench` without --solutions: the agent over a problem set, one stored run per
problem. The real CLI, the real openai client against a scripted server on loopback, and real
evaluations on the CPU (few of them: each costs seconds)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO
from llm_server import Reply, ScriptedLLMServer

from kernelopt.cli import main

EXAMPLES = REPO / "examples"
QUICK_EVAL = ["--device", "cpu", "--timing-budget", "0.5", "--correctness-trials", "2"]
RELU_TYPO = (EXAMPLES / "candidates/1_ReLU/relu_clamp.py").read_text().replace("torch.clamp_min", "torch.clampmin")
RELU_CLAMP = (EXAMPLES / "candidates/1_ReLU/relu_clamp.py").read_text()
SOFTMAX_FAST = (EXAMPLES / "candidates/4_RedundantSoftmax/drop_dead_work.py").read_text()
BROKEN_REFERENCE = (EXAMPLES / "level1/1_ReLU.py").read_text().replace(
    "return torch.relu(x)", "raise RuntimeError('this reference is broken')")


def answer(code: str) -> str:
    return f"Here it is.\n```python\n{code}```\n"


def is_relu(body: dict) -> bool:
    return "torch.relu(x)" in json.dumps(body)


@pytest.fixture
def endpoint(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    for name in ("OPENAI_BASE_URL", "KERNELOPT_MODEL", "KERNELOPT_STORE"):
        monkeypatch.delenv(name, raising=False)


def make_set(root: Path, files: dict[str, str]) -> Path:
    """A KernelBench checkout holding level1/<name> = text."""
    level1 = root / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    for name, text in files.items():
        (level1 / name).write_text(text)
    return root


def bench_args(problem_set: Path, out: Path, store: Path, url: str, *extra: str) -> list[str]:
    return ["bench", "--kernelbench", str(problem_set), "--out", str(out), "--store", str(store),
            "--model", "test-model", "--base-url", url, "--json", *QUICK_EVAL, *extra]


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_pass_resumes_and_ends_with_the_metrics_and_the_runs(endpoint, capsys, tmp_path):
    """The first process is killed (SIGKILL) while the second problem's LLM call is in flight:
    the first problem is finished and skipped afterwards, the second problem's run (named in
    runs.json before its first call) is resumed, and no answered call is asked again."""
    problem_set = make_set(tmp_path / "set", {
        "1_ReLU.py": (EXAMPLES / "level1/1_ReLU.py").read_text(),
        "4_RedundantSoftmax.py": (EXAMPLES / "level1/4_RedundantSoftmax.py").read_text()})
    out, store = tmp_path / "out", tmp_path / "runs.sqlite"
    release = threading.Event()

    def script(body, index):
        if is_relu(body):
            return answer(RELU_TYPO)
        if not release.is_set():
            release.wait(60)            # holds the first process's softmax call until it is dead
        return answer(SOFTMAX_FAST)

    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "KERNELOPT_STORE")}
    with ScriptedLLMServer(script) as server:
        command = [sys.executable, "-m", "kernelopt", *bench_args(problem_set, out, store, server.url),
                   "--budget", "1"]
        first = subprocess.Popen(command, env={**env, "OPENAI_API_KEY": "test-key"}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180
        while len(server.requests) < 2 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert len(server.requests) == 2, first.communicate()[1][-3000:]
        first.send_signal(signal.SIGKILL)
        first.wait()
        release.set()
        finished = lines(out / "results.jsonl")
        runs = json.loads((out / "runs.json").read_text())["runs"]
        assert [r["key"] for r in finished if r["kind"] == "agent"] == ["agent/1/1"]
        assert set(runs) == {"agent/1/1", "agent/1/4"}, "the run is named before its first call"
        db = sqlite3.connect(store)
        assert db.execute("SELECT status FROM runs WHERE id=?", (runs["agent/1/4"],)).fetchone() == ("running",)

        code = main(bench_args(problem_set, out, store, server.url, "--budget", "1"))
        output, err = capsys.readouterr()
        requests = [is_relu(body) for body in server.requests]
    assert code == 0, err
    assert requests == [True, False, False], "only the call lost in the kill is asked again"
    assert "[1/2] level 1 problem 1 (ReLU): runtime_error (1 LLM call) (from an earlier run)" in err
    assert "[2/2] level 1 problem 4 (RedundantSoftmax): correct" in err and "ETA" in err

    summary = json.loads(output)
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "agent"
    assert summary["problems"] == [{"level": 1, "problem_id": 1, "name": "ReLU"},
                                   {"level": 1, "problem_id": 4, "name": "RedundantSoftmax"}]
    level1 = summary["levels"]["1"]
    # ReLU: the typo is a runtime error, no correct result; the softmax without its dead matmul
    # is correct and far faster: one problem of two.
    assert level1["n_problems"] == 2 and level1["n_correct"] == 1 and level1["fast_0"] == 0.5
    assert level1["fast_2"] == 0.5 and level1["n_missing"] == 0
    assert summary["health"] == {"1/4": ["below_tolerance"]}
    assert summary["llm_calls"] == 2 and summary["statuses"] == {"runtime_error": 1, "correct": 1}

    records = {r["key"]: r for r in lines(out / "results.jsonl") if r["kind"] == "agent"}
    relu, softmax = records["agent/1/1"], records["agent/1/4"]
    assert relu["status"] == "runtime_error" and relu["correct"] is False and relu["speedup"] is None
    assert relu["best_by_call"] == [[1, None]] and relu["llm_calls"] == 1
    assert softmax["status"] == "correct" and softmax["speedup"] > 2
    assert softmax["run_id"] == runs["agent/1/4"], "the killed problem's run was resumed, not restarted"
    assert softmax["best_by_call"] == [[1, softmax["speedup"]]]
    assert level1["geomean_speedup"] == pytest.approx(softmax["speedup"])
    assert "pytorch" in softmax["optimization_kinds"]
    # refine profiles by default: the best candidate's profile is in the record, for the report
    assert softmax["profile"]["roofline"]["flops"] == 2 * 2048 * 2048 * 64 and relu["profile"] is None
    for key in ("level", "problem_id", "name", "flags", "wall_s", "cost"):
        assert key in softmax

    stored = {row[0]: json.loads(row[1]) for row in db.execute("SELECT id, config FROM runs")}
    assert len(stored) == 2
    assert stored[softmax["run_id"]]["bench"] == {"level": 1, "problem_id": 4, "set": str(problem_set)}
    assert main(["runs", "show", softmax["run_id"], "--store", str(store), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run"]["status"] == "finished" and [c["status"] for c in shown["candidates"]] == ["correct"]


def test_failing_problems_are_recorded_and_a_failed_run_is_resumed_on_the_next_pass(endpoint, capsys, tmp_path):
    """A key rejected in the middle of one problem's run (run_failed) and a broken reference
    (problem_error, no LLM call spent on it) do not stop the other problems; the next pass
    resumes the failed run and skips the rest."""
    problem_set = make_set(tmp_path / "set", {
        "1_ReLU.py": (EXAMPLES / "level1/1_ReLU.py").read_text(), "6_Broken.py": BROKEN_REFERENCE})
    out, store = tmp_path / "out", tmp_path / "runs.sqlite"
    script = [Reply(status=401), answer(RELU_CLAMP)]
    with ScriptedLLMServer(script) as server:
        code = main(bench_args(problem_set, out, store, server.url, "--budget", "1"))
        first, err = capsys.readouterr()
        sent_first = len(server.requests)
        records = {r["key"]: r for r in lines(out / "results.jsonl") if r["kind"] == "agent"}
        # Other settings for the same OUT would mix two experiments: refused before any work.
        assert main(bench_args(problem_set, out, store, server.url, "--strategy", "best-of-n")) == 2
        assert "other settings" in capsys.readouterr().err and len(server.requests) == sent_first
        second_code = main(bench_args(problem_set, out, store, server.url, "--budget", "1"))
        second, err_second = capsys.readouterr()
        sent = len(server.requests)
    assert code == 1, err                      # a run stopped on an error: rerun to resume it
    summary = json.loads(first)
    assert summary["statuses"] == {"run_failed": 1, "problem_error": 1}
    assert summary["levels"]["1"]["fast_0"] == 0.0 and summary["levels"]["1"]["n_missing"] == 0
    relu, broken = records["agent/1/1"], records["agent/1/6"]
    assert "API key" in relu["error"] and relu["best_by_call"] == [[1, None]] and relu["correct"] is False
    assert broken["status"] == "problem_error" and broken["run_id"] is None and broken["llm_calls"] == 0
    assert "this reference is broken" in broken["error"] and broken["best_by_call"] == []
    assert "reference_fails" in summary["health"]["1/6"]

    assert second_code == 0, err_second
    assert sent_first == 1 and sent == 2, "only the failed problem asks again"
    second = json.loads(second)
    assert second["statuses"] == {"correct": 1, "problem_error": 1}
    assert second["levels"]["1"]["fast_0"] == 0.5
    resumed = {r["key"]: r for r in lines(out / "results.jsonl") if r["kind"] == "agent"}["agent/1/1"]
    assert resumed["run_id"] == relu["run_id"] and resumed["status"] == "correct"
    assert resumed["best_by_call"] == [[1, None], [2, resumed["speedup"]]], "the failed call stays on record"
    assert sqlite3.connect(store).execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_gpus_without_cuda_is_a_usage_error(endpoint, capsys, tmp_path):
    problem_set = make_set(tmp_path / "set", {"1_ReLU.py": (EXAMPLES / "level1/1_ReLU.py").read_text()})
    with ScriptedLLMServer([answer(RELU_CLAMP)]) as server:
        for gpus in ("0", "all"):
            code = main(["bench", "--kernelbench", str(problem_set), "--model", "test-model", "--base-url",
                         server.url, "--out", str(tmp_path / "out"), "--gpus", gpus])
            assert code == 2 and "--gpus needs CUDA" in capsys.readouterr().err
        assert server.requests == []


def test_usage_errors_before_any_work(endpoint, monkeypatch, capsys, tmp_path):
    problem_set = make_set(tmp_path / "set", {"1_ReLU.py": (EXAMPLES / "level1/1_ReLU.py").read_text()})
    out, store = tmp_path / "out", tmp_path / "runs.sqlite"
    with ScriptedLLMServer([answer(RELU_CLAMP)]) as server:
        code = main(bench_args(problem_set, out, store, server.url, "--gpus", "0"))
        assert code == 2 and "--gpus" in capsys.readouterr().err   # no CUDA, or --device cpu beside it
        code = main(["bench", "--kernelbench", str(problem_set), "--base-url", server.url, "--out", str(out)])
        assert code == 2 and "--model is required" in capsys.readouterr().err
        code = main(bench_args(problem_set, out, store, server.url, "--solutions", str(tmp_path), "--budget", "2"))
        assert code == 2 and "--budget" in capsys.readouterr().err
        assert server.requests == []
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    code = main(["bench", "--kernelbench", str(problem_set), "--model", "m", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "nothing will be optimized" in err and "kernelopt bench --kernelbench SET" in err
    assert not out.exists()


def test_solutions_mode_writes_its_summary_too(tmp_path):
    from kernelopt.bench.rescore import Solution, rescore
    from kernelopt.kernelbench import load_problem_set
    from kernelopt.sandbox import EvalOptions

    problem_set = load_problem_set(make_set(tmp_path / "set", {
        "1_ReLU.py": (EXAMPLES / "level1/1_ReLU.py").read_text()}))
    outside = Solution(9, 9, 0, tmp_path / "level_9_problem_9_sample_0_kernel.py", "not judged")
    summary = rescore(problem_set, [outside], EvalOptions(device="cpu"), tmp_path / "out", 1, lambda line: None)
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written == summary and written["mode"] == "solutions" and written["n_outside_set"] == 1
    assert written["problems"] == [{"level": 1, "problem_id": 1, "name": "ReLU"}]
    assert written["levels"]["1"]["n_missing"] == 1


def test_problems_are_shared_out_one_per_device_each_on_its_own_cores():
    from kernelopt.bench.runner import run_on_devices

    seen, lock = [], threading.Lock()

    def work(item, device):
        with lock:
            seen.append((item, device, frozenset(os.sched_getaffinity(0)), threading.current_thread().name))
        time.sleep(0.05)

    run_on_devices(list(range(6)), ["cuda:0", "cuda:1"], work)
    assert sorted(item for item, *_ in seen) == list(range(6))
    cores = {device: {c for _, d, c, _ in seen if d == device} for device in ("cuda:0", "cuda:1")}
    assert all(len(sets) == 1 for sets in cores.values()), "each device keeps its share"
    if len(os.sched_getaffinity(0)) >= 2:
        first, second = (next(iter(sets)) for sets in cores.values())
        assert not first & second, "two devices' timings never share a core"
    assert os.sched_getaffinity(0) == set().union(*(c for _, _, c, _ in seen)), "the caller keeps all its cores"

    def failing(item, device):
        if item == 0:
            raise RuntimeError("the sandbox cannot start")

    with pytest.raises(RuntimeError, match="sandbox"):
        run_on_devices([0, 1, 2], ["cuda:0", "cuda:1"], failing)


@pytest.mark.gpu
def test_problems_run_on_every_gpu_and_concurrently(endpoint, capsys, tmp_path):
    """--gpus all end to end; then the driver with two problems at once (two threads on the one
    GPU when there is only one)."""
    import torch

    from kernelopt.bench.agent_runs import SetRun, bench_agent
    from kernelopt.agent.search import OptimizeConfig
    from kernelopt.agent.store import RunStore
    from kernelopt.kernelbench import load_problem_set

    problem_set = make_set(tmp_path / "set", {
        "1_ReLU.py": (EXAMPLES / "level1/1_ReLU.py").read_text(),
        "4_RedundantSoftmax.py": (EXAMPLES / "level1/4_RedundantSoftmax.py").read_text()})
    with ScriptedLLMServer(lambda body, index: answer(RELU_CLAMP if is_relu(body) else SOFTMAX_FAST)) as server:
        code = main(["bench", "--kernelbench", str(problem_set), "--out", str(tmp_path / "out"), "--store",
                     str(tmp_path / "s.sqlite"), "--model", "test-model", "--base-url", server.url, "--json",
                     "--gpus", "all", "--budget", "1", "--timing-budget", "1"])
        summary = json.loads(capsys.readouterr().out)
        count = torch.cuda.device_count()
        devices = [f"cuda:{i}" for i in range(count)] if count > 1 else ["cuda:0", "cuda:0"]
        template = OptimizeConfig(problem_path=str(problem_set), model="test-model", base_url=server.url,
                                  eval_options={"timing_budget": 1.0})
        template.limits["llm_calls"] = 1
        concurrent = bench_agent(SetRun(load_problem_set(problem_set), template, RunStore(tmp_path / "t.sqlite"),
                                        tmp_path / "out2", devices, "test-key"), lambda line: None)
    assert code == 0
    assert summary["levels"]["1"]["fast_0"] == 1.0
    assert concurrent["levels"]["1"]["fast_0"] == 1.0 and concurrent["n_problems_run"] == 2
    configs = [json.loads(c) for (c,) in sqlite3.connect(tmp_path / "s.sqlite").execute("SELECT config FROM runs")]
    assert {c["device"] for c in configs} <= {f"cuda:{i}" for i in range(count)}

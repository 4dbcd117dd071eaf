"""RunStore: runs, LLM calls, the response cache, candidates and evaluations in one SQLite file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelopt.agent.store import RunStore, StoreError
from kernelopt.kernelbench import problem_from_source
from kernelopt.sandbox.results import EvalResult, Timing, TimingStats, TrialResult

SOURCE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return x * 2


    def get_inputs():
        return [torch.randn(16)]


    def get_init_inputs():
        return []
    """)

REQUEST = {"model": "test-model", "messages": [{"role": "user", "content": "go"}]}


@pytest.fixture
def problem():
    return problem_from_source(SOURCE, path="level1/7_Double.py")


@pytest.fixture
def store(tmp_path):
    s = RunStore(tmp_path / "runs" / "store.sqlite")
    yield s
    try:
        s.close()
    except Exception:
        pass


def stats(ms: float) -> TimingStats:
    return TimingStats(samples=10, median_ms=ms, mean_ms=ms, std_ms=0.01, min_ms=ms * 0.9,
                       max_ms=ms * 1.1, p25_ms=ms * 0.95, p75_ms=ms * 1.05, rel_iqr=0.1)


def correct_result(speedup: float = 2.0) -> EvalResult:
    return EvalResult(
        status="correct", correct=True, speedup=speedup, reference_ms=1.0, candidate_ms=1.0 / speedup,
        message="fast", trials=[TrialResult(index=0, seed=1, passed=True, max_abs_error=1e-6)],
        timing=Timing(method="cuda_events", reference=stats(1.0), candidate=stats(1.0 / speedup),
                      rounds=3, calls_per_round=10, reference_ms=1.0, candidate_ms=1.0 / speedup),
        optimization_kinds=["custom_kernel"], durations={"total": 1.5})


# runs --------------------------------------------------------------------------------------------


def test_create_run_and_read_it_back(store, problem):
    store.create_run("run-1", problem, "test-model", "refine", {"llm_calls": 8, "seed": 3})
    run = store.run("run-1")
    assert run["id"] == "run-1"
    assert run["status"] == "running"
    assert run["problem_name"] == "Double"
    assert run["problem_path"] == "level1/7_Double.py"
    assert run["problem_hash"] == problem.content_hash
    assert run["problem_source"] == SOURCE
    assert run["model"] == "test-model"
    assert run["strategy"] == "refine"
    assert run["config"] == {"llm_calls": 8, "seed": 3}
    assert run["summary"] is None
    assert run["error"] is None
    assert run["created"] <= run["updated"]


def test_runs_lists_all_runs_oldest_first(store, problem):
    assert store.runs() == []
    for run_id in ("b-run", "a-run", "c-run"):
        store.create_run(run_id, problem, "m", "tree", {})
        time.sleep(0.002)
    assert [r["id"] for r in store.runs()] == ["b-run", "a-run", "c-run"]


def test_unknown_run_is_a_store_error(store, problem):
    store.create_run("run-1", problem, "m", "refine", {})
    with pytest.raises(StoreError, match="no-such-run"):
        store.run("no-such-run")


def test_set_run_status_with_summary(store, problem):
    store.create_run("run-1", problem, "m", "refine", {})
    before = store.run("run-1")["updated"]
    time.sleep(0.002)
    store.set_run_status("run-1", "finished", summary={"best_speedup": 2.5, "attempts": 4})
    run = store.run("run-1")
    assert run["status"] == "finished"
    assert run["summary"] == {"best_speedup": 2.5, "attempts": 4}
    assert run["updated"] > before
    # a later status change without a summary keeps the summary and records the error
    store.set_run_status("run-1", "failed", error="endpoint gone")
    run = store.run("run-1")
    assert run["status"] == "failed"
    assert run["summary"] == {"best_speedup": 2.5, "attempts": 4}
    assert run["error"] == "endpoint gone"


# LLM calls ---------------------------------------------------------------------------------------


def test_add_call_and_find_call(store, problem):
    store.create_run("run-1", problem, "m", "refine", {})
    call_id = store.add_call("run-1", "key-a", 0, "generate", REQUEST, content="answer",
                             reasoning="because", response={"id": "x"}, prompt_tokens=11,
                             completion_tokens=22, latency_s=0.5, cost=0.001, attempts=2)
    record = store.find_call("run-1", "key-a", 0)
    assert record is not None
    assert record.id == call_id
    assert record.content == "answer"
    assert record.reasoning == "because"
    assert (record.prompt_tokens, record.completion_tokens) == (11, 22)
    assert record.latency_s == 0.5
    assert record.cost == 0.001
    assert record.source == "run"
    assert record.error is None
    assert store.find_call("run-1", "key-b", 0) is None
    assert store.find_call("other-run", "key-a", 0) is None

    [row] = store.calls("run-1")
    assert json.loads(row["request"]) == REQUEST
    assert json.loads(row["response"]) == {"id": "x"}
    assert row["purpose"] == "generate"
    assert row["attempts"] == 2
    assert row["source"] == "endpoint"


def test_find_call_ignores_failed_calls(store, problem):
    store.create_run("run-1", problem, "m", "refine", {})
    store.add_call("run-1", "key-a", 0, "generate", REQUEST, error="gave up after 6 attempts")
    assert store.find_call("run-1", "key-a", 0) is None
    ok_id = store.add_call("run-1", "key-a", 0, "generate", REQUEST, content="second try")
    record = store.find_call("run-1", "key-a", 0)
    assert record is not None and record.id == ok_id and record.content == "second try"
    assert [c["error"] for c in store.calls("run-1")] == ["gave up after 6 attempts", None]


def test_occurrence_distinguishes_identical_requests(store, problem):
    store.create_run("run-1", problem, "m", "best-of-n", {})
    first = store.add_call("run-1", "same-key", 0, "generate", REQUEST, content="sample 0")
    second = store.add_call("run-1", "same-key", 1, "generate", REQUEST, content="sample 1")
    assert store.find_call("run-1", "same-key", 0).id == first
    assert store.find_call("run-1", "same-key", 0).content == "sample 0"
    assert store.find_call("run-1", "same-key", 1).id == second
    assert store.find_call("run-1", "same-key", 1).content == "sample 1"
    assert store.find_call("run-1", "same-key", 2) is None


def test_response_cache(store):
    assert store.cached_answer("k", 0) is None
    store.cache_answer("k", 0, "cached text", "some reasoning", {"id": "c"}, 7, 9)
    store.cache_answer("k", 1, "second sample", None, None, 1, 2)
    hit = store.cached_answer("k", 0)
    assert hit is not None
    assert hit.content == "cached text"
    assert hit.reasoning == "some reasoning"
    assert (hit.prompt_tokens, hit.completion_tokens) == (7, 9)
    assert hit.source == "cache"
    assert hit.error is None
    assert store.cached_answer("k", 1).content == "second sample"
    assert store.cached_answer("k", 2) is None
    assert store.cached_answer("other", 0) is None
    # a later answer for the same key and occurrence replaces the old one
    store.cache_answer("k", 0, "newer", None, None, 1, 1)
    assert store.cached_answer("k", 0).content == "newer"


# candidates and evaluations ----------------------------------------------------------------------


def test_candidates_are_linked_to_calls_and_joined_with_evaluations(store, problem):
    store.create_run("run-1", problem, "m", "tree", {})
    call_a = store.add_call("run-1", "ka", 0, "generate", REQUEST, content="a")
    call_b = store.add_call("run-1", "kb", 0, "generate", REQUEST, content="b")
    call_c = store.add_call("run-1", "kc", 0, "generate", REQUEST, content="c")
    cand_a = store.add_candidate("run-1", call_a, None, "code A", "hash-a", None, {"depth": 1})
    cand_b = store.add_candidate("run-1", call_b, cand_a, None, None, "no code block", {"depth": 2})
    cand_c = store.add_candidate("run-1", call_c, cand_a, "code C", "hash-c", None, {"depth": 2})

    found = store.candidate_for_call(call_a)
    assert found["id"] == cand_a
    assert found["code"] == "code A"
    assert found["strategy_data"] == {"depth": 1}
    assert store.candidate_for_call(call_b)["format_error"] == "no code block"
    assert store.candidate_for_call(99999) is None

    store.add_evaluation("run-1", "hash-a", correct_result(2.0))

    rows = store.candidates("run-1")
    assert [r["id"] for r in rows] == [cand_a, cand_b, cand_c]
    assert [r["parent_id"] for r in rows] == [None, cand_a, cand_a]
    assert [r["llm_call_id"] for r in rows] == [call_a, call_b, call_c]
    assert rows[0]["status"] == "correct" and rows[0]["speedup"] == 2.0 and rows[0]["message"] == "fast"
    assert rows[1]["status"] is None and rows[1]["format_error"] == "no code block"
    assert rows[2]["status"] is None  # not judged yet
    assert [r["strategy_data"] for r in rows] == [{"depth": 1}, {"depth": 2}, {"depth": 2}]
    assert store.candidates("other-run") == []


def test_evaluation_round_trips(store, problem):
    store.create_run("run-1", problem, "m", "refine", {})
    result = correct_result(2.0)
    assert store.find_evaluation("run-1", "hash-a") is None
    store.add_evaluation("run-1", "hash-a", result)
    stored = store.find_evaluation("run-1", "hash-a")
    assert stored is not None
    back = EvalResult.model_validate_json(stored)
    assert back == result
    assert back.speedup == 2.0 and back.correct and back.timing.candidate.median_ms == 0.5
    assert store.find_evaluation("run-2", "hash-a") is None

    [row] = store.evaluations("run-1")
    assert row["code_hash"] == "hash-a"
    assert row["status"] == "correct"
    assert row["correct"] == 1
    assert row["speedup"] == 2.0

    # one verdict per code hash: a second one replaces the first
    failed = EvalResult(status="compile_error", correct=False, message="nvcc failed", compile_log="error")
    store.add_evaluation("run-1", "hash-a", failed)
    assert EvalResult.model_validate_json(store.find_evaluation("run-1", "hash-a")) == failed
    [row] = store.evaluations("run-1")
    assert (row["status"], row["correct"], row["speedup"]) == ("compile_error", 0, None)


# durability --------------------------------------------------------------------------------------


def test_data_persists_after_close_and_reopen(tmp_path, problem):
    path = tmp_path / "store.sqlite"
    store = RunStore(path)
    store.create_run("run-1", problem, "m", "evolve", {"population": 4})
    call_id = store.add_call("run-1", "k", 0, "generate", REQUEST, content="answer")
    store.add_candidate("run-1", call_id, None, "code", "h", None, {"generation": 0})
    store.add_evaluation("run-1", "h", correct_result(3.0))
    store.cache_answer("k", 0, "answer", None, None, 1, 1)
    store.set_run_status("run-1", "finished", summary={"best": 3.0})
    store.close()

    reopened = RunStore(path)
    try:
        assert reopened.run("run-1")["status"] == "finished"
        assert reopened.run("run-1")["summary"] == {"best": 3.0}
        assert reopened.run("run-1")["config"] == {"population": 4}
        assert reopened.find_call("run-1", "k", 0).content == "answer"
        assert reopened.candidates("run-1")[0]["speedup"] == 3.0
        assert EvalResult.model_validate_json(reopened.find_evaluation("run-1", "h")).speedup == 3.0
        assert reopened.cached_answer("k", 0).content == "answer"
    finally:
        reopened.close()


CHILD = textwrap.dedent("""\
    import os, signal, sys
    from kernelopt.agent.store import RunStore
    from kernelopt.kernelbench import problem_from_source

    path, source = sys.argv[1], sys.stdin.read()
    store = RunStore(path)
    store.create_run("crashed", problem_from_source(source), "m", "refine", {})
    for i in range(3):
        store.add_call("crashed", f"key-{i}", 0, "generate", {"i": i}, content=f"answer {i}")
    print("written", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """)


def test_calls_survive_a_killed_process(tmp_path):
    path = tmp_path / "store.sqlite"
    child = subprocess.run([sys.executable, "-c", CHILD, str(path)], input=SOURCE, capture_output=True,
                           text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.strip() == "written"
    # the process never closed the store: its last writes are still in the write-ahead log
    assert Path(f"{path}-wal").exists()

    store = RunStore(path)
    try:
        assert store.run("crashed")["status"] == "running"
        calls = store.calls("crashed")
        assert [c["content"] for c in calls] == ["answer 0", "answer 1", "answer 2"]
        for i in range(3):
            assert store.find_call("crashed", f"key-{i}", 0).content == f"answer {i}"
    finally:
        store.close()


def test_unusable_store_path_is_a_store_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="cannot open the run store"):
        RunStore(blocker / "sub" / "store.sqlite")
    with pytest.raises(StoreError):
        RunStore(blocker / "store.sqlite")


def test_store_that_is_not_a_database_is_a_store_error(tmp_path):
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(b"this is not an SQLite database at all" * 100)
    with pytest.raises(StoreError):
        RunStore(path)

"""`kernelopt optimize` and `kernelopt runs` end to end: the real CLI, the real openai client
against a scripted OpenAI-compatible server on loopback, and real evaluations on the CPU."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from conftest import (
    REPO, SOFTMAX_BROKEN as BROKEN, SOFTMAX_EQUAL as EQUAL, SOFTMAX_FAST as FAST, optimize_killed_at_third_call,
    resume_optimize,
)
from llm_server import Reply, ScriptedLLMServer

from kernelopt.cli import main

PROBLEM = REPO / "examples" / "level1" / "4_RedundantSoftmax.py"
QUICK_EVAL = ["--device", "cpu", "--timing-budget", "1", "--correctness-trials", "2"]



def answer(code: str, prose: str = "Here is my kernel.") -> str:
    return f"{prose}\n```python\n{code}```\n"


NO_CODE = "I am not sure how to make this faster."


@pytest.fixture
def endpoint(monkeypatch):
    """Environment for a configured endpoint: the test key, no base URL from outside."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("KERNELOPT_MODEL", raising=False)


def optimize(capsys, server, store, *extra) -> tuple[int, dict | None, str]:
    """Runs `kernelopt optimize --json` in this process; returns (exit code, summary, stderr)."""
    code = main(["optimize", str(PROBLEM), "--model", "test-model", "--base-url", server.url,
                 "--store", str(store), "--json", *QUICK_EVAL, *extra])
    out, err = capsys.readouterr()
    summary = json.loads(out) if out.strip() else None
    return code, summary, err


def test_refine_finds_the_fast_candidate_and_feeds_back_the_error(endpoint, capsys, tmp_path):
    script = [answer(BROKEN), answer(EQUAL), answer(FAST), answer(FAST, "The same again.")]
    with ScriptedLLMServer(script) as server:
        code, summary, err = optimize(capsys, server, tmp_path / "s.sqlite",
                                      "--strategy", "refine", "--budget", "4")
        texts = server.user_texts()
    assert code == 0, err
    assert summary["best"]["status"] == "correct"
    assert summary["best"]["speedup"] > 3, summary          # the dead matmul is gone
    assert Path(summary["best"]["path"]).read_text() == FAST
    assert summary["llm_calls"] == 4 and summary["candidates"] == 4
    assert summary["evaluations"] == 3                      # the repeated FAST is judged once
    assert "sofmax" not in texts[0]
    for later in texts[1:]:                                 # every request after the broken one
        assert "has no attribute 'sofmax'" in later
    assert "runtime_error" in texts[1]
    assert "[attempt 1/4" in err and "best" in err          # live progress on stderr


def test_best_of_n_dedupes_identical_code_and_stops_at_the_target(endpoint, capsys, tmp_path):
    script = [answer(BROKEN), NO_CODE, answer(FAST), answer(FAST), answer(FAST)]
    with ScriptedLLMServer(script) as server:
        code, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--strategy", "best-of-n",
                                    "--budget", "12", "--window", "2", "--target-speedup", "2")
        sent = len(server.requests)
    assert code == 0
    assert "target speedup" in summary["stop_reason"]
    assert summary["best"]["speedup"] >= 2
    assert sent < 12 and summary["llm_calls"] == sent
    assert summary["evaluations"] == 2                       # BROKEN and FAST, each once
    assert summary["statuses"]["format_error"] == 1


@pytest.mark.parametrize("flags, expected_calls, reason", [
    (["--budget", "2"], 2, "LLM call budget"),
    (["--budget", "50", "--max-tokens-total", "2500"], 3, "token budget"),
    (["--budget", "50", "--price", "1000", "0", "--max-cost", "2.5"], 3, "cost budget"),
])
def test_call_token_and_cost_budgets_are_honoured(endpoint, capsys, tmp_path, flags, expected_calls, reason):
    reply = Reply(content=NO_CODE, prompt_tokens=1000, completion_tokens=0)  # $1 at $1000/Mtok
    with ScriptedLLMServer([reply]) as server:
        code, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--strategy", "refine", *flags)
        sent = len(server.requests)
    assert code == 0
    assert sent == expected_calls and summary["llm_calls"] == expected_calls
    assert reason in summary["stop_reason"]
    if "--price" in flags:
        assert summary["cost"] == pytest.approx(3.0)
    else:  # no price for the model: unknown, not free
        assert summary["cost"] is None


def test_a_run_without_a_price_says_its_cost_is_unknown(endpoint, capsys, tmp_path):
    from kernelopt.agent.store import describe_cost
    from kernelopt.cli.text import summary_text

    with ScriptedLLMServer([Reply(content=NO_CODE, prompt_tokens=1000, completion_tokens=0)]) as server:
        _, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--strategy", "refine", "--budget", "1")
    assert summary["cost"] is None and "cost unknown (no --price for the model)" in summary_text(summary)
    assert describe_cost(0.0) == "$0.0000"  # a price and nothing paid (cached answers): known, and free


def test_wall_time_budget(endpoint, capsys, tmp_path):
    with ScriptedLLMServer([Reply(content=NO_CODE, delay=0.4)]) as server:
        code, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--strategy", "refine",
                                    "--budget", "100", "--max-wall", "1")
    assert code == 0
    assert "wall-time budget" in summary["stop_reason"]
    assert 2 <= summary["llm_calls"] <= 4


def test_evaluation_budget(endpoint, capsys, tmp_path):
    with ScriptedLLMServer([answer(BROKEN), answer(FAST)]) as server:
        code, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--strategy", "refine",
                                    "--budget", "10", "--max-evals", "1")
    assert code == 0
    assert summary["evaluations"] == 1 and summary["llm_calls"] == 1
    assert "evaluation budget" in summary["stop_reason"]


def test_rate_limits_and_server_errors_are_retried(endpoint, capsys, tmp_path):
    script = [Reply(status=429, headers={"retry-after": "0"}), Reply(status=500), answer(FAST)]
    with ScriptedLLMServer(script) as server:
        code, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--strategy", "refine",
                                    "--budget", "1")
        sent = len(server.requests)
    assert code == 0
    assert sent == 3                                   # two failures, then the answer
    assert summary["llm_calls"] == 1 and summary["llm_calls_failed"] == 0
    assert summary["best"]["speedup"] > 1
    calls = sqlite3.connect(tmp_path / "s.sqlite").execute("SELECT attempts FROM llm_calls").fetchall()
    assert calls == [(3,)]


def test_a_rejected_key_stops_before_any_work(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "wrong-key")
    with ScriptedLLMServer([answer(FAST)], api_key="right-key") as server:
        code, summary, err = optimize(capsys, server, tmp_path / "s.sqlite")
        assert server.answered() == 0
    assert code == 2 and summary["ok"] is False and summary["error"] == "bad_input"  # --json's failure object
    assert "rejected the API key" in err and "OPENAI_API_KEY" in err
    assert main(["runs", "list", "--store", str(tmp_path / "s.sqlite"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []


def test_a_401_in_the_middle_of_a_run_ends_it_cleanly(endpoint, capsys, tmp_path):
    script = [answer(BROKEN), Reply(status=401), answer(FAST)]
    with ScriptedLLMServer(script) as server:
        code, summary, err = optimize(capsys, server, tmp_path / "s.sqlite", "--budget", "3")
        sent = len(server.requests)
    assert code == 1                                   # started, then stopped on an error
    assert sent == 2                                   # no retry of the 401, no further calls
    assert summary["status"] == "failed" and "API key" in summary["stop_reason"]
    assert summary["best"] is None and summary["evaluations"] == 1


@pytest.mark.parametrize("case, expected", [
    ("unreachable", "cannot reach the LLM endpoint"),
    ("unknown model", "unknown model 'test-model'"),
    ("no model", "--model is required"),
])
def test_configuration_errors_are_reported_before_any_work(endpoint, capsys, tmp_path, case, expected):
    with ScriptedLLMServer([answer(FAST)], models=("other-model",)) as server:
        url = server.url
        if case == "unknown model":
            code, _, err = optimize(capsys, server, tmp_path / "s.sqlite")
            assert server.requests == []
    if case == "unreachable":        # the server is stopped now: nothing listens there
        code = main(["optimize", str(PROBLEM), "--model", "m", "--base-url", url,
                     "--store", str(tmp_path / "s.sqlite")])
        err = capsys.readouterr().err
    if case == "no model":
        code = main(["optimize", str(PROBLEM), "--base-url", url, "--store", str(tmp_path / "s.sqlite")])
        err = capsys.readouterr().err
    assert code == 2
    assert expected in err


def test_without_an_endpoint_it_explains_and_shows_the_referee(monkeypatch, capsys, tmp_path):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    problem = tmp_path / "level1" / "4_RedundantSoftmax.py"
    problem.parent.mkdir()
    problem.write_text(PROBLEM.read_text())
    bundled = tmp_path / "candidates" / "4_RedundantSoftmax"
    bundled.mkdir(parents=True)
    (bundled / "fast.py").write_text(FAST)
    code = main(["optimize", str(problem), "--device", "cpu", "--timing-budget", "1",
                 "--store", str(tmp_path / "s.sqlite")])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "nothing will be optimized" in err
    assert "OPENAI_API_KEY" in err and "--base-url http://localhost:8000/v1" in err
    assert "fast.py" in err and "correct, speedup" in err


def test_a_rerun_asks_afresh_unless_told_to_reuse_answers_and_then_says_so(endpoint, capsys, tmp_path):
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer([NO_CODE]) as server:
        first = optimize(capsys, server, store, "--budget", "2")[1]
        after_first = len(server.requests)
        fresh = optimize(capsys, server, store, "--budget", "2")[1]
        after_fresh = len(server.requests)
        _, reused, reused_err = optimize(capsys, server, store, "--budget", "2", "--reuse-answers")
        after_reused = len(server.requests)
        texts = server.user_texts()
    assert after_first == 2 and after_fresh == 4 and after_reused == 4
    assert len({first["run_id"], fresh["run_id"], reused["run_id"]}) == 3 and reused["llm_calls"] == 2
    assert "verdict: format_error" in texts[1] and "ModelNew" in texts[1]   # fed back

    def sources(run_id):
        return [r[0] for r in sqlite3.connect(store).execute(
            "SELECT source FROM llm_calls WHERE run_id=? ORDER BY id", (run_id,))]
    assert sources(fresh["run_id"]) == ["endpoint", "endpoint"]
    assert sources(reused["run_id"]) == ["cache", "cache"]
    progress = [line for line in reused_err.splitlines() if line.startswith("[attempt")]
    assert len(progress) == 2 and all("reused from an earlier run" in line for line in progress)


def test_tree_search_expands_the_best_subtree(endpoint, capsys, tmp_path):
    codes = [BROKEN, FAST]
    with ScriptedLLMServer(lambda body, i: answer(codes[i % 2])) as server:
        code, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--strategy", "tree",
                                    "--width", "2", "--depth", "3", "--budget", "6")
        texts = server.user_texts()
    assert code == 0 and summary["llm_calls"] == 6 and summary["evaluations"] == 2
    db = sqlite3.connect(tmp_path / "s.sqlite")
    rows = db.execute("SELECT id, parent_id, code, strategy_data FROM candidates ORDER BY id").fetchall()
    depth = {r[0]: json.loads(r[3])["depth"] for r in rows}
    assert [depth[r[0]] for r in rows[:2]] == [1, 1] and rows[0][1] is None
    fast_root = next(r[0] for r in rows[:2] if r[2] == FAST)
    # the FAST root has the highest max-reward value, so it is expanded first
    assert [r[1] for r in rows[2:4]] == [fast_root, fast_root]
    assert all(depth[r[0]] == depth[r[1]] + 1 for r in rows[2:])
    assert "Make it faster" in texts[2]


def test_evolve_shows_scored_exemplars_across_buckets(endpoint, capsys, tmp_path):
    codes = [BROKEN, FAST, EQUAL]
    with ScriptedLLMServer(lambda body, i: answer(codes[i % 3])) as server:
        code, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--strategy", "evolve",
                                    "--population", "3", "--budget", "6")
        texts = server.user_texts()
    assert code == 0 and summary["llm_calls"] == 6 and summary["evaluations"] == 3
    for text in texts[3:]:
        assert "Earlier versions with their scores" in text and "Start from this version" in text
        assert "compare the versions" in text
    assert any("runtime error" in t for t in texts[3:])            # the failed bucket is shown


def test_runs_list_and_show(endpoint, capsys, tmp_path):
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer([answer(FAST)]) as server:
        _, summary, _ = optimize(capsys, server, store, "--budget", "1")
    assert main(["runs", "list", "--store", str(store), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run_id"] for r in listed] == [summary["run_id"]]
    assert listed[0]["best_speedup"] == pytest.approx(summary["best"]["speedup"])
    assert main(["runs", "list", "--store", str(store)]) == 0
    header, row = capsys.readouterr().out.splitlines()[-2:]  # not a terminal: plain lines, a header first
    assert header.split()[:3] == ["run", "status", "problem"] and row.startswith(summary["run_id"])
    assert main(["runs", "show", summary["run_id"], "--store", str(store), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run"]["status"] == "finished"
    [candidate] = shown["candidates"]
    assert candidate["status"] == "correct"
    timing = candidate["timing"]
    low, high = timing["speedup_interval"]
    assert low < candidate["speedup"] < high and timing["reference_ms"] > 0 and timing["candidate_ms"] > 0
    assert main(["runs", "show", summary["run_id"], "--store", str(store)]) == 0
    text = capsys.readouterr().out
    assert f"{candidate['speedup']:.3f}x +-" in text and "reference " in text
    message = candidate["message"].splitlines()[0]
    assert message in " ".join(text.split())  # wrapped, not cut
    wrapped = [line for line in text.splitlines() if line.startswith(" " * 8) and line.strip() in message]
    assert wrapped and all(len(line) <= 100 for line in wrapped)
    assert main(["runs", "show", "nope", "--store", str(store)]) == 2


def test_a_killed_run_resumes_without_repeating_work(tmp_path):
    """The first process is killed (SIGKILL) while waiting for its third answer; the resumed
    run replays the two finished calls and evaluations from the store and asks only for the
    rest."""
    release = threading.Event()
    codes = [BROKEN, EQUAL, FAST, FAST]

    def script(body, index):
        if index == 2 and not release.is_set():
            release.wait(60)            # holds the first process's third call until it is dead
        return answer(codes[min(index, 3)])

    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer(script) as server:
        db, run_id, before = optimize_killed_at_third_call(
            server, release, store, [str(PROBLEM), "--strategy", "refine", "--budget", "4", *QUICK_EVAL])
        assert len(before) == 2 and db.execute("SELECT status FROM runs").fetchone() == ("running",)
        resumed = resume_optimize(store, run_id)
        sent = len(server.requests)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    assert sent == 5                     # 3 before the kill (the third unanswered) + 2 after
    assert summary["llm_calls"] == 4 and summary["status"] == "finished"
    assert summary["best"]["speedup"] > 3
    after = db.execute("SELECT id, code_hash, created FROM evaluations ORDER BY id").fetchall()
    assert after[:2] == before and len(after) == 3    # finished evaluations kept, not redone


def test_a_price_table_prices_the_calls_and_a_broken_one_is_an_input_error(endpoint, capsys, tmp_path):
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"test-model": [1000, 0], "other": [1, 1]}))
    reply = Reply(content=NO_CODE, prompt_tokens=1000, completion_tokens=0)
    with ScriptedLLMServer([reply]) as server:
        code, summary, _ = optimize(capsys, server, tmp_path / "s.sqlite", "--budget", "5",
                                    "--price-table", str(table), "--max-cost", "1.5")
        assert code == 0 and summary["llm_calls"] == 2 and summary["cost"] == pytest.approx(2.0)
        table.write_text("[1, 2]")
        code, summary, err = optimize(capsys, server, tmp_path / "s.sqlite", "--price-table", str(table))
    assert code == 2 and summary["ok"] is False and "price table" in err
    code = main(["optimize", str(PROBLEM), "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                 "--max-cost", "1"])
    assert code == 2 and "--max-cost needs a price" in capsys.readouterr().err


def test_ctrl_c_stops_within_two_seconds_and_prints_the_resume_command(endpoint, tmp_path):
    """Ctrl-C while a candidate is being judged and the next LLM request is held by the server:
    the command exits within 2 s (neither the evaluation nor the request is waited for), says
    how to resume, leaves the run `interrupted` in the store, and --json still gets one object.
    (Resuming a stopped run: test_a_killed_run_resumes_without_repeating_work.)"""
    import signal
    import subprocess
    import time

    from conftest import KERNELOPT, as_terminal_job, optimize_environment

    release = threading.Event()

    def script(body, index):
        if index == 0:
            return answer(FAST)
        release.wait(60)  # the second request hangs until the test is done with the first process
        return answer(EQUAL)

    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer(script) as server:
        command = [KERNELOPT, "optimize", str(PROBLEM), "--model", "test-model", "--base-url", server.url,
                   "--store", str(store), "--json", "--strategy", "best-of-n", "--budget", "2",
                   "--device", "cpu", "--timing-budget", "30", "--correctness-trials", "2"]
        process = subprocess.Popen(as_terminal_job(command), env=optimize_environment(), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while len(server.requests) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        time.sleep(3)  # the first candidate's evaluation is under way (30 s of timing)
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
        took = time.monotonic() - interrupted
        release.set()
    assert process.returncode == 130, err[-2000:]
    assert took < 2.0, f"took {took:.1f} s to stop"
    (run_id,) = sqlite3.connect(store).execute("SELECT id FROM runs").fetchone()
    assert f"kernelopt optimize --resume {run_id} --store {store}" in err
    failure = json.loads(out)
    assert failure["ok"] is False and failure["error"] == "interrupted" and run_id in failure["message"]
    (status,) = sqlite3.connect(store).execute("SELECT status FROM runs").fetchone()
    assert status == "interrupted"

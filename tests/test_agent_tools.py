"""`--strategy agent`: tool-calling conversations through the real openai client against the
scripted loopback server, the real referee on the CPU, the real store."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest

from conftest import REPO, SOFTMAX_BROKEN as BROKEN, SOFTMAX_FAST as FAST, optimize_killed_at_third_call, resume_optimize
from llm_server import Reply, ScriptedLLMServer, ToolCall

from kernelopt.cli import main

PROBLEM = REPO / "examples" / "level1" / "4_RedundantSoftmax.py"
QUICK_EVAL = ["--device", "cpu", "--timing-budget", "1", "--correctness-trials", "2"]


# evaluate twice (broken, then fast), profile once, submit
SCRIPT = [
    Reply(tool_calls=[ToolCall("reference", {}, id="r1"), ToolCall("evaluate", {"code": BROKEN}, id="e1")]),
    Reply(content="Fixing the typo.", tool_calls=[ToolCall("evaluate", {"code": FAST}, id="e2")]),
    Reply(tool_calls=[ToolCall("profile", {"code": FAST}, id="p1")]),
    Reply(tool_calls=[ToolCall("submit", {"code": FAST}, id="s1")]),
]


@pytest.fixture
def endpoint(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("KERNELOPT_MODEL", raising=False)


def optimize(capsys, server, store, *extra) -> tuple[int, dict | None, str]:
    code = main(["optimize", str(PROBLEM), "--model", "test-model", "--base-url", server.url,
                 "--store", str(store), "--json", "--strategy", "agent", *QUICK_EVAL, *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def tool_messages(request: dict) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def test_an_attempt_evaluates_twice_profiles_and_submits(endpoint, capsys, tmp_path):
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer(SCRIPT, when_exhausted="error") as server:
        code, summary, err = optimize(capsys, server, store, "--budget", "4")
        requests = list(server.requests)
    assert code == 0, err
    assert len(requests) == 4
    assert [t["function"]["name"] for t in requests[0]["tools"]] == \
        ["evaluate", "profile", "reference", "best", "submit"]
    # what the model read back: the reference, the broken verdict with its error, the fast one
    answers = tool_messages(requests[1])
    assert "problem: RedundantSoftmax" in answers["r1"] and "class Model" in answers["r1"]
    assert "verdict: " in answers["e1"] and "verdict: correct" not in answers["e1"]
    assert "has no attribute 'sofmax'" in answers["e1"]
    later = tool_messages(requests[3])
    assert "verdict: correct" in later["e2"] and "speedup" in later["e2"]
    assert "profile:" in later["p1"]
    assert "budget left: 1 replies" in later["p1"]   # the 4th reply is the last
    # the assistant messages go back with their tool calls, in order
    assistant = [m for m in requests[3]["messages"] if m["role"] == "assistant"]
    assert [[c["id"] for c in m["tool_calls"]] for m in assistant] == [["r1", "e1"], ["e2"], ["p1"]]

    assert summary["best"]["status"] == "correct" and summary["best"]["speedup"] > 3
    assert summary["llm_calls"] == 4
    assert summary["evaluations"] == 2              # FAST judged once, however often it is passed
    db = sqlite3.connect(store)
    rows = db.execute("SELECT turn, call_id, name, is_error, candidate_id FROM tool_calls ORDER BY id").fetchall()
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (0, "r1", "reference", 0), (0, "e1", "evaluate", 0), (1, "e2", "evaluate", 0),
        (2, "p1", "profile", 0), (3, "s1", "submit", 0)]
    assert rows[0][4] is None and all(r[4] for r in rows[1:])

    # runs show lists the conversation; the export writes it in the messages format
    assert main(["runs", "show", summary["run_id"], "--store", str(store), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in shown["tool_calls"]] == ["reference", "evaluate", "evaluate", "profile", "submit"]
    assert main(["runs", "show", summary["run_id"], "--store", str(store)]) == 0
    text = capsys.readouterr().out
    assert "submit" in text and "profile" in text

    out = tmp_path / "agentic.jsonl"
    assert main(["export", "--store", str(store), "--format", "agentic", "--out", str(out),
                 "--reward", "binary"]) == 0
    capsys.readouterr()
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool",
                     "assistant", "tool", "assistant", "tool"]
    calls = [c for m in row["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
    assert [c["function"]["name"] for c in calls] == ["reference", "evaluate", "evaluate", "profile", "submit"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"code": BROKEN}
    results = {m["tool_call_id"]: m["content"] for m in row["messages"] if m["role"] == "tool"}
    assert "has no attribute 'sofmax'" in results["e1"] and "submitted" in results["s1"]
    assert [t["function"]["name"] for t in row["tools"]][0] == "evaluate"
    assert row["turn_rewards"] == [0.0, 1.0, 1.0, 1.0]          # binary: the broken turn earns 0
    assert row["returns"] == [3.0, 3.0, 2.0, 1.0] and row["max_returns"] == [1.0, 1.0, 1.0, 1.0]
    assert row["final_reward"] == 1.0 and row["final_status"] == "correct"


def test_malformed_tool_calls_are_answered_as_tool_errors(endpoint, capsys, tmp_path):
    script = [
        Reply(tool_calls=[ToolCall("evaluate", '{"code": "unterminated', id="bad_json"),
                          ToolCall("compile", {"code": FAST}, id="unknown"),
                          ToolCall("evaluate", {}, id="no_code"),
                          ToolCall("evaluate", {"code": "print('no model here')"}, id="no_model")]),
        Reply(tool_calls=[ToolCall("submit", {"code": FAST}, id="s1"),
                          ToolCall("evaluate", {"code": BROKEN}, id="after")]),
    ]
    with ScriptedLLMServer(script, when_exhausted="error") as server:
        code, summary, err = optimize(capsys, server, tmp_path / "s.sqlite", "--budget", "2")
        requests = list(server.requests)
    assert code == 0, err
    answers = tool_messages(requests[1])
    assert answers["bad_json"].startswith("error: evaluate: the arguments are not valid JSON")
    assert answers["unknown"].startswith("error: unknown tool 'compile'") and "evaluate" in answers["unknown"]
    assert answers["no_code"].startswith("error: evaluate needs")
    assert answers["no_model"].startswith("error:") and "ModelNew" in answers["no_model"]
    assert summary["best"]["status"] == "correct"
    assert summary["evaluations"] == 1            # nothing malformed reached the referee
    db = sqlite3.connect(tmp_path / "s.sqlite")
    after = db.execute("SELECT result, is_error FROM tool_calls WHERE call_id='after'").fetchone()
    assert after == ("error: not run: the attempt was submitted", 1)


def test_a_call_after_the_evaluation_budget_is_a_tool_error(endpoint, capsys, tmp_path):
    script = [Reply(tool_calls=[ToolCall("evaluate", {"code": BROKEN}, id="e1"),
                                ToolCall("evaluate", {"code": FAST}, id="e2"),
                                ToolCall("best", {}, id="b1")])]
    with ScriptedLLMServer(script, when_exhausted="error") as server:
        code, summary, err = optimize(capsys, server, tmp_path / "s.sqlite", "--budget", "5",
                                      "--max-evals", "1")
    assert code == 0, err
    db = sqlite3.connect(tmp_path / "s.sqlite")
    (result,) = db.execute("SELECT result FROM tool_calls WHERE call_id='e2'").fetchone()
    assert result.startswith("error: not judged: evaluation budget spent")
    (later,) = db.execute("SELECT result FROM tool_calls WHERE call_id='b1'").fetchone()
    assert later.startswith("error: not run: evaluation budget spent")
    assert summary["evaluations"] == 1 and summary["llm_calls"] == 1   # no reply after the budget
    assert "evaluation budget spent" in summary["stop_reason"]


def test_a_server_without_tools_gets_a_clear_error_naming_the_other_strategies(endpoint, capsys, tmp_path):
    with ScriptedLLMServer([Reply(content="unused")], tools=False) as server:
        code, summary, err = optimize(capsys, server, tmp_path / "s.sqlite", "--budget", "3")
    assert code != 0 or summary["status"] == "failed"
    shown = err + json.dumps(summary)
    assert "--enable-auto-tool-choice" in shown and "tool (function) calling" in shown
    assert "refine, best-of-n" in shown


def test_a_text_answer_with_a_program_is_its_submission(endpoint, capsys, tmp_path):
    script = ["I cannot call tools, sorry.", f"Here it is.\n```python\n{FAST}```\n"]
    with ScriptedLLMServer(script, when_exhausted="error") as server:
        code, summary, err = optimize(capsys, server, tmp_path / "s.sqlite", "--budget", "2")
        requests = list(server.requests)
    assert code == 0, err
    assert requests[1]["messages"][-1]["content"].startswith("Use the tools")
    assert summary["best"]["status"] == "correct"


def test_a_killed_conversation_resumes_without_repeating_work(tmp_path):
    """Killed while waiting for the third reply; the resumed run replays the two finished
    replies and their evaluations from the store and asks only for the rest."""
    release = threading.Event()

    def script(body, index):
        turn = sum(m["role"] == "assistant" for m in body["messages"])   # the reply this asks for
        if turn == 2 and not release.is_set():
            release.wait(60)
        return SCRIPT[turn]

    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer(script) as server:
        db, run_id, before = optimize_killed_at_third_call(
            server, release, store, [str(PROBLEM), "--strategy", "agent", "--budget", "4", *QUICK_EVAL])
        tools_before = db.execute("SELECT id, call_id FROM tool_calls ORDER BY id").fetchall()
        assert len(before) == 2 and [t[1] for t in tools_before] == ["r1", "e1", "e2"]
        resumed = resume_optimize(store, run_id)
        requests = list(server.requests)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    assert len(requests) == 5                  # 3 before the kill (the third unanswered) + 2 after
    assert requests[3] == requests[2]          # the replay rebuilt the very same conversation
    assert summary["llm_calls"] == 4 and summary["status"] == "finished"
    assert summary["best"]["speedup"] > 3
    after = db.execute("SELECT id, code_hash, created FROM evaluations ORDER BY id").fetchall()
    assert after == before                     # nothing judged twice
    tools_after = db.execute("SELECT id, call_id FROM tool_calls ORDER BY id").fetchall()
    assert tools_after[:3] == tools_before and [t[1] for t in tools_after[3:]] == ["p1", "s1"]
    candidates = db.execute("SELECT count(*) FROM candidates").fetchone()[0]
    assert candidates == 4                     # e1, e2, p1, s1: none recorded twice


def test_a_session_and_its_workbench_run_the_agent_and_number_its_conversations(endpoint, tmp_path):
    from kernelopt import Session

    script = [Reply(tool_calls=[ToolCall("submit", {"code": BROKEN}, id="s1")]),
              Reply(tool_calls=[ToolCall("best", {}, id="b1"), ToolCall("submit", {"code": FAST}, id="s2")])]
    with ScriptedLLMServer(script, when_exhausted="error") as server:
        session = Session.open(PROBLEM, model="test-model", base_url=server.url, device="cpu",
                               store=tmp_path / "s.sqlite",
                               eval_options={"timing_budget": 1, "correctness_trials": 2})
        from kernelopt.tune.workbench import Workbench

        workbench = Workbench(session)     # the tune page's view of the same session
        try:
            first = session.run("agent", calls=1)
            second = session.run("agent", calls=1)
            shown = workbench.detail(second[0].number)["tool_call"]
        finally:
            workbench.close()
        requests = list(server.requests)
    assert [c.status for c in first] == ["runtime_error"] and [c.status for c in second] == ["correct"]
    assert shown["name"] == "submit" and shown["conversation"] == 1 and shown["turn"] == 0
    assert "verdict: correct" in shown["result"] and "submitted" in shown["result"]
    assert len(requests) == 2 and len(requests[1]["messages"]) == 2   # the second starts afresh
    db = sqlite3.connect(tmp_path / "s.sqlite")
    rows = db.execute("SELECT conversation, call_id, result FROM tool_calls ORDER BY id").fetchall()
    assert [r[:2] for r in rows] == [(0, "s1"), (1, "b1"), (1, "s2")]
    assert rows[1][2].startswith("no correct candidate yet")


def test_the_mcp_referee_over_a_set_names_its_problems(tmp_path):
    """`kernelopt mcp --kernelbench`: the tools take `problem`; a missing or unknown one is a
    tool error, and each problem used gets its own run (no evaluation needed to see it)."""
    from kernelopt.agent.mcp_server import Referee, RefereeSettings
    from kernelopt.agent.store import RunStore
    from kernelopt.kernelbench import load_problem_set

    problems = list(load_problem_set(REPO / "examples", levels={1}, ids={1, 4}).problems)
    store = RunStore.open(tmp_path / "s.sqlite")
    referee = Referee(problems, RefereeSettings(store=store, device="cpu", out=tmp_path / "out"))
    try:
        assert referee.call("problems", {}).text == "level1/1_ReLU: ReLU\nlevel1/4_RedundantSoftmax: RedundantSoftmax"
        missing = referee.call("reference", {})
        assert missing.is_error and "level1/1_ReLU, level1/4_RedundantSoftmax" in missing.text
        assert referee.call("best", {"problem": "level9/nope"}).text.startswith("error: unknown problem")
        shown = referee.call("reference", {"problem": "level1/1_ReLU"})
        assert not shown.is_error and "problem: ReLU" in shown.text
        assert referee.call("evaluate", {"problem": "level1/4_RedundantSoftmax", "code": ""}).is_error
        assert sorted(referee.run_ids()) == ["level1/1_ReLU", "level1/4_RedundantSoftmax"]
    finally:
        referee.close()
    assert {r["status"] for r in store.runs()} == {"finished"} and len(store.runs()) == 2
    assert [t["name"] for t in store.tool_calls(store.runs()[0]["id"])] == ["reference"]

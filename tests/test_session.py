"""The interactive Session API (kernelopt/agent/session.py) end to end: the real openai client
against the scripted OpenAI-compatible server on loopback, real evaluations on the CPU, and the
records read back through `kernelopt runs show` and `kernelopt export`."""

from __future__ import annotations

import json
import threading
import time

import pytest

from conftest import REPO, SOFTMAX_EQUAL as SLOW, SOFTMAX_FAST as FAST, SOFTMAX_BROKEN as BROKEN, SOFTMAX_PROGRAM
from llm_server import Reply, ScriptedLLMServer

from kernelopt import Session, SessionError
from kernelopt.cli import main

PROBLEM = REPO / "examples" / "level1" / "4_RedundantSoftmax.py"
QUICK_EVAL = {"timing_budget": 1, "correctness_trials": 2}

HAND = SOFTMAX_PROGRAM.format(body="        # written by hand </pre><script>alert(1)</script>\n        return torch.softmax(x, -1)")
NO_CODE = "I am not sure how to make this faster."


def answer(code: str) -> str:
    return f"Here is my kernel.\n```python\n{code}```\n"


@pytest.fixture
def endpoint(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def open_session(server, tmp_path, **kwargs) -> Session:
    return Session.open(PROBLEM, model="test-model", base_url=server.url, device="cpu",
                        store=tmp_path / "s.sqlite", eval_options=QUICK_EVAL, **kwargs)


def cli_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_ask_sample_submit_diff_accept_and_every_record_in_the_store(endpoint, capsys, tmp_path):
    with ScriptedLLMServer([answer(SLOW), answer(FAST), answer(BROKEN)]) as server:
        with open_session(server, tmp_path) as s:
            c = s.ask("try vectorized float4 loads")
            samples = s.sample(2, parent=c)
            v = s.submit(HAND, parent=c)
            texts = server.user_texts()
            best = s.best
            diff = str(s.diff(c, v))
            accepted = s.accept(v, tmp_path / "kernels" / "best.py")
            run_id = s.run_id

    assert c.status == "correct" and c.hint == "try vectorized float4 loads"
    assert "try vectorized float4 loads" in texts[0]           # the hint reached the model
    for refine in texts[1:]:                                    # the samples refine c, no hint
        assert "unused = x.t() @ x" in refine and "vectorized" not in refine
    assert sorted(x.status for x in samples) == ["correct", "runtime_error"]
    assert all(x.parent == c for x in samples)
    assert v.source == "hand" and v.status == "correct" and v.parent == c
    assert best.speedup > c.speedup and best in (v, *samples)
    assert "-        unused = x.t() @ x" in diff and "+        # written by hand" in diff
    assert (tmp_path / "kernels" / "best.py").read_text() == HAND
    assert "kernelopt eval --reference" in accepted.command and str(tmp_path / "kernels" / "best.py") in accepted.command

    shown = cli_json(capsys, "runs", "show", run_id, "--store", str(tmp_path / "s.sqlite"))
    assert shown["run"]["status"] == "finished" and shown["run"]["strategy"] == "interactive"
    rows = shown["candidates"]
    assert [r["strategy_data"].get("source") for r in rows] == ["hint", "sample", "sample", "hand"]
    assert rows[0]["strategy_data"]["hint"] == "try vectorized float4 loads"
    assert [r["parent_id"] for r in rows] == [None, rows[0]["id"], rows[0]["id"], rows[0]["id"]]
    assert rows[3]["llm_call_id"] is None and len(shown["llm_calls"]) == 3
    assert shown["run"]["summary"]["best"]["speedup"] == pytest.approx(best.speedup)

    out = tmp_path / "export.jsonl"
    cli_json(capsys, "export", "--store", str(tmp_path / "s.sqlite"), "--run", run_id, "--format", "jsonl",
             "--out", str(out))
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(exported) == 4 and exported[3]["code"] == HAND


def test_display_in_a_notebook_escapes_what_candidates_hold(endpoint, tmp_path):
    with ScriptedLLMServer([answer(FAST)]) as server, open_session(server, tmp_path) as s:
        v = s.submit(HAND)
        shown = [v._repr_html_(), v.verdict._repr_html_(), s._repr_html_(), s.diff("reference", v)._repr_html_()]
    assert "correct, speedup" in shown[0]
    for html in shown:
        assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown[0]


def test_resume_continues_an_optimize_run_with_new_calls(endpoint, capsys, tmp_path):
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer([answer(BROKEN), answer(SLOW), answer(FAST)]) as server:
        summary = cli_json(capsys, "optimize", str(PROBLEM), "--model", "test-model", "--base-url", server.url,
                           "--store", str(store), "--budget", "2", "--device", "cpu", "--timing-budget", "1",
                           "--correctness-trials", "2")
        with Session.resume(summary["run_id"], store=store) as s:
            before = [x.status for x in s.candidates]
            c = s.ask("drop the dead matmul", parent=s.best)
        sent = len(server.requests)
    assert before == ["runtime_error", "correct"]
    assert sent == 3                                          # a new call, not a replay
    assert c.status == "correct" and c.parent.code == SLOW
    rows = cli_json(capsys, "runs", "show", summary["run_id"], "--store", str(store))["candidates"]
    assert len(rows) == 3 and rows[2]["parent_id"] == rows[1]["id"]
    assert rows[2]["strategy_data"] == {"source": "hint", "hint": "drop the dead matmul"}


def test_a_resumed_session_judges_the_candidates_left_pending(endpoint, tmp_path):
    from kernelopt.agent.attempt import code_hash

    with ScriptedLLMServer([answer(FAST)]) as server:
        with open_session(server, tmp_path) as s:
            run_id = s.run_id
            # As a run killed while judging leaves it: the candidate stored, its verdict never.
            s.pipeline.store.add_candidate(run_id, None, None, FAST, code_hash(FAST), None, {"source": "hand"})
        with Session.resume(run_id, store=tmp_path / "s.sqlite", base_url=server.url) as s:
            assert [c.status for c in s.left_pending()] == ["not_evaluated"]
            judged = s.judge_pending()
            assert [c.status for c in judged] == ["correct"] and s.left_pending() == []
            assert s.judge_pending() == []
        with Session.resume(run_id, store=tmp_path / "s.sqlite", base_url=server.url) as s:
            assert [c.status for c in s.candidates] == ["correct"] and s.left_pending() == []  # recorded


def test_a_strategy_runs_for_its_budget_and_stop_ends_it(endpoint, tmp_path):
    with ScriptedLLMServer([Reply(content=NO_CODE, delay=0.2)]) as server, open_session(server, tmp_path) as s:
        done = s.run("refine", calls=2)
        assert [x.status for x in done] == ["format_error", "format_error"]
        assert done[1].parent == done[0]
        runner = threading.Thread(target=s.run, kwargs={"strategy": "refine", "calls": 100})
        runner.start()
        time.sleep(0.7)
        s.stop()
        runner.join(10)
        assert not runner.is_alive()
        assert 2 < len(s.candidates) < 12
        after = s.ask()                                       # the next action starts afresh
        assert after.status == "format_error"
        assert s.usage().llm_calls == len(s.candidates)


def test_bad_input_is_a_clear_error_and_the_session_goes_on(endpoint, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model(:\n")
    with ScriptedLLMServer([Reply(status=401), answer(FAST)]) as server:
        with pytest.raises(SessionError, match="cannot use the problem"):
            Session.open(broken, model="test-model", base_url=server.url, store=tmp_path / "s.sqlite")
        with pytest.raises(SessionError, match="unknown strategy"), open_session(server, tmp_path) as s:
            failed = s.ask()                                  # the endpoint answers 401 once
            assert failed.status == "llm_error" and "API key" in s.errors[0]
            assert s.ask().status == "correct"                # and the session goes on
            with pytest.raises(SessionError, match="no candidate with id 999"):
                s.ask(parent=999)
            s.run("no-such-strategy")
        url = server.url
    with pytest.raises(SessionError, match="cannot reach the LLM endpoint"):
        Session.open(PROBLEM, model="test-model", base_url=url, device="cpu", store=tmp_path / "s.sqlite")

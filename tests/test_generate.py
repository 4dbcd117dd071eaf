"""`kernelopt generate`: K independent samples per problem, each refined T turns on its own
feedback, every answer judged and stored with its parent; resumable from the store. The real
CLI and openai client against a scripted server on loopback, real evaluations on the CPU."""

from __future__ import annotations

import json
import sqlite3

from conftest import REPO
from llm_server import ScriptedLLMServer

from kernelopt.cli import main

EXAMPLES = REPO / "examples"
TYPO = (EXAMPLES / "candidates/4_RedundantSoftmax/typo.py").read_text()
FAST = (EXAMPLES / "candidates/4_RedundantSoftmax/drop_dead_work.py").read_text()


def answer(code: str) -> str:
    return f"Here it is.\n```python\n{code}```\n"


def test_samples_refined_on_their_own_feedback_with_parent_links_and_resume(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    for name in ("OPENAI_BASE_URL", "KERNELOPT_MODEL", "KERNELOPT_STORE"):
        monkeypatch.delenv(name, raising=False)
    level1 = tmp_path / "set" / "level1"
    level1.mkdir(parents=True)
    (level1 / "4_RedundantSoftmax.py").write_text((EXAMPLES / "level1/4_RedundantSoftmax.py").read_text())
    out, store = tmp_path / "out", tmp_path / "runs.sqlite"

    def generate(url: str, *extra: str) -> tuple[int, dict | None, str]:
        code = main(["generate", "--problems", str(tmp_path / "set"), "--ids", "4", "--samples", "2", "--turns", "1",
                     "--model", "test-model", "--base-url", url, "--out", str(out), "--store", str(store),
                     "--json", "--device", "cpu", "--timing-budget", "0.5", "--correctness-trials", "2", *extra])
        printed, err = capsys.readouterr()
        return code, json.loads(printed) if printed.strip() else None, err

    # The two first attempts are one prompt sent twice: the first answer is the typo, the rest FAST.
    with ScriptedLLMServer(lambda body, index: answer(TYPO if index == 0 else FAST)) as server:
        # A pass cut short after the first turn (budget 2), as if killed before the problem's
        # line was written: the next pass resumes the stored run.
        code, _, err = generate(server.url, "--budget", "2")
        assert code == 0, err
        (out / "generate.jsonl").write_text("")
        code, summary, err = generate(server.url)
        requests = server.user_texts()
        code_again, again, err_again = generate(server.url)
        sent = len(server.requests)

    assert code == 0, err
    assert len(requests) == 4, "the first turn is replayed from the store, not asked again"
    assert summary["candidates"] == summary["scored"] == 4
    assert summary["counts"] == {"runtime_error": 1, "correct": 3}
    assert summary["problems_with_correct"] == 1 and summary["llm_calls"] == 4
    (line,) = [r for r in map(json.loads, (out / "generate.jsonl").read_text().splitlines()) if r["kind"] == "generate"]
    assert line["kind"] == "generate" and line["problem_id"] == 4 and line["status"] == "finished"
    assert line["counts"] == summary["counts"] and line["best"]["speedup"] > 2

    db = sqlite3.connect(store)
    (run_id, config), = db.execute("SELECT id, config FROM runs").fetchall()
    assert line["run_id"] == run_id
    assert json.loads(config)["strategy"] == "samples"
    assert json.loads(config)["bench"] == {"level": 1, "problem_id": 4, "set": str(tmp_path / "set")}
    rows = db.execute("SELECT c.id, c.parent_id, c.strategy_data, c.code, c.llm_call_id, l.request FROM candidates c"
                      " JOIN llm_calls l ON l.id = c.llm_call_id ORDER BY c.id").fetchall()
    cells = {(json.loads(r[2])["sample"], json.loads(r[2])["turn"]): r for r in rows}
    assert sorted(cells) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for sample in (0, 1):
        first, refined = cells[(sample, 0)], cells[(sample, 1)]
        assert first[1] is None and refined[1] == first[0], "a refinement's parent is its own chain's answer"
        prompt = json.dumps(json.loads(refined[5])["messages"])
        if first[3] == TYPO:   # this chain saw its own runtime error, and nothing of the other chain
            assert "has no attribute 'sofmax'" in prompt and "Honest:" not in prompt
        else:
            assert "sofmax" not in prompt and "correct" in prompt

    # A third pass finds the problem done: nothing asked, the same summary.
    assert code_again == 0, err_again
    assert sent == 4 and "(from an earlier run)" in err_again
    assert again["counts"] == summary["counts"]

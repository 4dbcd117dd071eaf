"""The `kernelopt tune` workbench's HTTP side (kernelopt/tune): the token on every request, the
JSON API, the live event stream and the command, against the scripted OpenAI-compatible server
(the real openai client) with real evaluations on the CPU. The page itself: test_tune_browser.py."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import REPO
from llm_server import Reply, ScriptedLLMServer

from kernelopt import Session
from kernelopt.tune.server import TuneServer
from kernelopt.tune.workbench import Workbench

PROBLEM = REPO / "examples" / "level1" / "4_RedundantSoftmax.py"
QUICK_EVAL = {"timing_budget": 1, "correctness_trials": 2}
FAST = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
"""
NO_CODE = "I am not sure how to make this faster."


def answer(code: str) -> str:
    return f"Here it is.\n```python\n{code}```\n"


def call(url: str, body: dict | bytes | None = None, token: str | None = None) -> tuple[int, object]:
    """(status, JSON or text) of one request; `token` goes in the header."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if token:
        request.add_header("X-Kernelopt-Token", token)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw, kind = response.status, response.read(), response.headers.get("content-type", "")
    except urllib.error.HTTPError as exc:
        status, raw, kind = exc.code, exc.read(), exc.headers.get("content-type", "")
    return status, json.loads(raw) if kind.startswith("application/json") else raw.decode()


class EventReader:
    """The event stream read on a thread: (kind, payload) pairs in a queue."""

    def __init__(self, url: str):
        self.events: queue.Queue = queue.Queue()
        self.response = urllib.request.urlopen(url, timeout=60)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        kind = None
        for raw in self.response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                self.events.put((kind, json.loads(line[6:])))

    def until(self, kind: str, match=lambda payload: True, timeout: float = 90) -> list[tuple[str, dict]]:
        """Every event up to and including the first `kind` whose payload matches."""
        seen, deadline = [], time.monotonic() + timeout
        while True:
            event = self.events.get(timeout=max(0.1, deadline - time.monotonic()))
            seen.append(event)
            if event[0] == kind and match(event[1]):
                return seen


@pytest.fixture
def endpoint(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def workbench(endpoint, tmp_path):
    """(LLM server, tune server): the LLM answers FAST to a hint about softmax, else no code."""
    def script(body, index):
        text = "\n".join(m["content"] for m in body["messages"])
        return Reply(content=answer(FAST) if "fused softmax" in text else NO_CODE, delay=0.1)

    with ScriptedLLMServer(script) as llm:
        session = Session.open(PROBLEM, model="test-model", base_url=llm.url, device="cpu",
                               store=tmp_path / "s.sqlite", eval_options=QUICK_EVAL, price=(1000.0, 0.0))
        with TuneServer(Workbench(session)) as tune:
            yield llm, tune


def test_every_request_and_the_event_stream_need_the_token(workbench):
    llm, tune = workbench
    base = tune.base_url
    for path in ("/", "/api/state", "/static/app.js", "/api/events", "/api/candidates/1"):
        assert call(base + path)[0] == 403, path
        assert call(base + path + "?token=wrong")[0] == 403, path
    status, text = call(base + "/api/ask", {"hint": "go"})
    assert status == 403 and "the URL that `kernelopt tune` printed" in text
    assert call(base + "/api/ask", {"hint": "go"}, token="x" + tune.token)[0] == 403
    time.sleep(0.3)
    assert llm.requests == []                                  # nothing was asked
    status, page = call(tune.url)
    assert status == 200 and "kernelopt tune" in page and f"static/app.js?token={tune.token}" in page
    assert call(f"{base}/static/app.js?token={tune.token}")[0] == 200
    assert call(base + "/api/state", token=tune.token)[0] == 200


def test_answers_and_verdicts_arrive_live_and_the_hint_reaches_the_model(workbench):
    llm, tune = workbench
    events = EventReader(f"{tune.base_url}/api/events?token={tune.token}")
    assert events.until("state")[0][1]["candidates"] == []
    assert call(tune.base_url + "/api/ask", {"hint": "use a fused softmax"}, token=tune.token)[0] == 202
    seen = events.until("judged")
    kinds = [kind for kind, _ in seen]
    assert kinds.index("busy") < kinds.index("started") < kinds.index("answered") < kinds.index("judged")
    judged = seen[-1][1]
    assert judged["status"] == "correct" and judged["hint"] == "use a fused softmax" and judged["speedup"] > 1
    assert "use a fused softmax" in llm.user_texts()[0]
    events.until("busy", lambda payload: payload["busy"] is None)

    status, state = call(tune.base_url + "/api/state", token=tune.token)
    assert state["best"] == 1 and state["usage"]["llm_calls"] == 1 and state["chart"] == [[1, pytest.approx(judged["speedup"], rel=1e-3)]]
    usage = state["usage"]
    assert usage["prompt_tokens"] > 100 and usage["cost"] == pytest.approx(usage["prompt_tokens"] / 1000)
    status, detail = call(tune.base_url + "/api/candidates/1", token=tune.token)
    assert detail["code"] == FAST and detail["verdict"]["status"] == "correct"
    assert '<span class="hl-kn">import</span>' in detail["code_html"]


def test_hand_edits_diffs_and_accept(workbench, tmp_path):
    _, tune = workbench
    events = EventReader(f"{tune.base_url}/api/events?token={tune.token}")
    edited = FAST.replace("dim=-1", "-1") + "# </pre><script>alert(1)</script>\n"
    assert call(tune.base_url + "/api/submit", {"code": edited}, token=tune.token)[0] == 202
    judged = events.until("judged")[-1][1]
    assert judged["source"] == "hand" and judged["status"] == "correct"
    status, diff = call(f"{tune.base_url}/api/diff?old=reference&new=1", token=tune.token)
    assert status == 200 and "+        return torch.softmax(x, -1)" in diff["text"]
    assert "<script>" not in diff["html"] and "&lt;script&gt;" in diff["html"]
    target = tmp_path / "kept" / "softmax.py"
    accept = {"number": 1, "path": str(target)}
    # A folder outside the working directory is created only when asked for.
    status, refused = call(tune.base_url + "/api/accept", accept, token=tune.token)
    assert status == 400 and "does not exist and is outside the working directory" in refused["error"]
    assert not target.parent.exists()
    status, accepted = call(tune.base_url + "/api/accept", {**accept, "create_dirs": True}, token=tune.token)
    assert status == 200 and target.read_text() == edited
    assert accepted["command"].startswith(f"kernelopt eval --reference {PROBLEM} --candidate {target}")
    # An existing file is overwritten only when asked to.
    target.write_text("# mine\n")
    status, refused = call(tune.base_url + "/api/accept", accept, token=tune.token)
    assert status == 400 and "already exists" in refused["error"] and target.read_text() == "# mine\n"
    assert call(tune.base_url + "/api/accept", {**accept, "overwrite": True}, token=tune.token)[0] == 200
    assert target.read_text() == edited


@pytest.mark.parametrize("path, body, message", [
    ("/api/ask", {"parent": 7}, "no candidate 7"),
    ("/api/ask", {"n": 0}, "n must be a whole number"),
    ("/api/ask", {"hint": ["not", "text"]}, "hint must be text"),
    ("/api/ask", b"{not json", "not JSON"),
    ("/api/submit", {"code": "  "}, "the code is empty"),
    ("/api/run", {"strategy": "annealing", "calls": 2}, "unknown strategy 'annealing'"),
    ("/api/accept", {"number": 1, "path": "x.py"}, "no candidate 1"),
    ("/api/accept", {"number": 1, "path": "a\x00b.py"}, "NUL"),
    ("/api/accept", {"number": 1, "path": "a\ud800.py"}, "surrogate"),
    ("/api/ask", b"[" * 100_000, "not JSON"),
    ("/api/ask", b'{"n": NaN}', "not a JSON number"),
    ("/api/candidates/abc", None, "bad parameters"),
    ("/api/candidates/" + "9" * 5000, None, "bad parameters"),
    ("/api/diff?old=reference", None, "bad parameters"),
])
def test_bad_requests_are_refused_with_a_reason(workbench, path, body, message):
    _, tune = workbench
    status, answer_ = call(tune.base_url + path, body, token=tune.token)
    assert status == 400 and message in answer_["error"]


def raw_request(tune, headers: dict) -> tuple[int, dict]:
    import http.client

    connection = http.client.HTTPConnection(*tune.server_address[:2], timeout=30)
    try:
        connection.putrequest("GET", f"/api/state?token={tune.token}", skip_host=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_a_foreign_host_or_origin_is_refused_even_with_the_token(workbench):
    _, tune = workbench
    own = f"127.0.0.1:{tune.server_address[1]}"
    assert raw_request(tune, {"Host": own})[0] == 200
    assert raw_request(tune, {"Host": own, "Origin": f"http://{own}"})[0] == 200
    for headers in ({"Host": "rebound.example"}, {"Host": f"rebound.example:{tune.server_address[1]}"},
                    {"Host": own, "Origin": "http://evil.example"}, {"Host": own, "Origin": "null"}):
        status, answer_ = raw_request(tune, headers)
        assert status == 403 and ("Host" in answer_["error"] or "Origin" in answer_["error"]), headers


def test_one_action_at_a_time_and_stop(workbench):
    llm, tune = workbench
    assert call(tune.base_url + "/api/run", {"strategy": "refine", "calls": 100}, token=tune.token)[0] == 202
    status, busy = call(tune.base_url + "/api/ask", {}, token=tune.token)
    assert status == 409 and "busy: running refine" in busy["error"]
    time.sleep(0.5)
    assert call(tune.base_url + "/api/stop", {}, token=tune.token)[0] == 202
    deadline = time.monotonic() + 10
    while call(tune.base_url + "/api/state", token=tune.token)[1]["busy"] and time.monotonic() < deadline:
        time.sleep(0.1)
    state = call(tune.base_url + "/api/state", token=tune.token)[1]
    assert state["busy"] is None and 1 <= len(state["candidates"]) < 20
    assert all(c["status"] == "format_error" for c in state["candidates"])


def test_the_command_prints_a_tokened_url_and_stops_on_sigterm(endpoint, tmp_path):
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer([NO_CODE]) as llm:
        process = subprocess.Popen(
            [sys.executable, "-m", "kernelopt", "tune", str(PROBLEM), "--model", "test-model", "--base-url", llm.url,
             "--device", "cpu", "--store", str(store), "--no-browser"],
            stderr=subprocess.PIPE, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            line = process.stderr.readline()
            assert "open http://127.0.0.1:" in line, line
            url = line.split("open ", 1)[1].split(" ;", 1)[0]
            base = url.split("/?", 1)[0]
            assert call(base + "/api/state")[0] == 403
            status, state = call(url.replace("/?", "/api/state?"))
            assert status == 200 and state["problem"] == "RedundantSoftmax" and state["model"] == "test-model"
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0
    shown = subprocess.run([sys.executable, "-m", "kernelopt", "runs", "show", state["run_id"], "--store", str(store),
                            "--json"], capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert json.loads(shown.stdout)["run"]["status"] == "finished"


def test_the_command_refuses_a_broken_problem(endpoint, tmp_path, capsys):
    from kernelopt.cli import main

    broken = tmp_path / "broken.py"
    broken.write_text("class Model(:\n")
    assert main(["tune", str(broken), "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--no-browser"]) == 2
    assert "cannot use the problem" in capsys.readouterr().err

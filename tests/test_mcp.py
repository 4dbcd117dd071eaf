"""`kernelopt mcp`: the real server process, talked to with the `mcp` SDK's own client (stdio and
streamable HTTP), judging with the real referee on the CPU; the verdicts found in the store."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, SOFTMAX_BROKEN as BROKEN, SOFTMAX_FAST as FAST

mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

PROBLEM = REPO / "examples" / "level1" / "4_RedundantSoftmax.py"
QUICK_EVAL = ["--device", "cpu", "--timing-budget", "1", "--correctness-trials", "2"]
KERNELOPT = str(Path(sys.executable).parent / "kernelopt")



def text_of(result) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


async def session_calls(store: Path) -> dict:
    params = StdioServerParameters(command=KERNELOPT, args=["mcp", str(PROBLEM), "--store", str(store),
                                                            "--out", str(store.parent / "out"), *QUICK_EVAL],
                                   cwd=str(store.parent))
    seen: dict = {}
    with open(store.parent / "server.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                seen["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
                seen["reference"] = await session.call_tool("reference", {})
                seen["broken"] = await session.call_tool("evaluate", {"code": BROKEN})
                seen["fast"] = await session.call_tool("profile", {"code": FAST})
                seen["best"] = await session.call_tool("best", {})
                seen["no_code"] = await session.call_tool("evaluate", {"code": ""})
    return seen


def test_an_mcp_client_judges_candidates_and_the_store_keeps_them(tmp_path):
    store = tmp_path / "s.sqlite"
    seen = anyio.run(session_calls, store)
    log = (tmp_path / "server.log").read_text()
    assert seen["tools"] == ["best", "evaluate", "problems", "profile", "reference", "submit"], log
    assert "class Model" in text_of(seen["reference"]) and not seen["reference"].is_error
    broken = text_of(seen["broken"])
    assert "has no attribute 'sofmax'" in broken and "verdict: correct" not in broken
    fast = text_of(seen["fast"])
    assert "verdict: correct" in fast and "profile:" in fast
    assert "candidate 2" in text_of(seen["best"])
    assert seen["no_code"].is_error and "evaluate needs" in text_of(seen["no_code"])

    db = sqlite3.connect(store)
    runs = db.execute("SELECT id, strategy, status FROM runs").fetchall()
    assert [(r[1], r[2]) for r in runs] == [("mcp", "finished")]
    verdicts = db.execute("SELECT status, correct FROM evaluations ORDER BY id").fetchall()
    assert len(verdicts) == 2 and verdicts[0][1] == 0 and verdicts[1] == ("correct", 1)
    names = [r[0] for r in db.execute("SELECT name FROM tool_calls ORDER BY id")]
    assert names == ["reference", "evaluate", "profile", "best", "evaluate"]
    summary = json.loads(db.execute("SELECT summary FROM runs").fetchone()[0])
    assert summary["best"]["status"] == "correct" and Path(summary["best"]["path"]).read_text() == FAST


def post(url: str, body: dict, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_http_transport_refuses_requests_without_the_token(tmp_path):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    server = subprocess.Popen([KERNELOPT, "mcp", str(PROBLEM), "--store", str(tmp_path / "s.sqlite"),
                               "--http", "--port", str(port), "--token", "sesame", *QUICK_EVAL],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 240     # the server's imports, on a busy CI host
        while True:
            try:
                refused = post(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
                break
            except urllib.error.URLError as exc:
                if isinstance(exc, urllib.error.HTTPError):
                    refused = exc.code
                    break
                assert time.monotonic() < deadline and server.poll() is None, server.stderr.read()
                time.sleep(0.2)
        assert refused == 401
        assert post(url, {}, {"Authorization": "Bearer open"}) == 401

        async def listed() -> list[str]:
            client = httpx2.AsyncClient(headers={"Authorization": "Bearer sesame"}, timeout=60)
            async with client, streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return sorted(t.name for t in (await session.list_tools()).tools)
        assert "evaluate" in anyio.run(listed)
    finally:
        server.terminate()
        try:
            server.wait(120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_unusable_input_is_a_clear_error(capsys):
    from kernelopt.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["mcp", str(PROBLEM), "--http", "--port", str(port)]) == 2
        assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert main(["mcp"]) == 2
    assert "give one problem file or --kernelbench SET" in capsys.readouterr().err
    assert main(["mcp", "--kernelbench", "examples", "--problems", "999"]) == 2
    assert "no problem" in capsys.readouterr().err.lower()

"""`kernelopt tune --model-spots DIR`: the workbench lists the hot spots `kernelopt model extract`
wrote and opens any of them in a new run, through the HTTP API (the scripted OpenAI-compatible
server, a real extraction and a real verdict on the CPU), and the command's errors."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from llm_server import ScriptedLLMServer
from test_tune_server import NO_CODE, EventReader, call, endpoint, workbench  # noqa: F401 (the fixtures)

from kernelopt.agent.store import RunStore
from kernelopt.cli import main
from kernelopt.cli.parser import build_parser
from kernelopt.cli.tune import model_spots, open_session, open_spot_session
from kernelopt.tune.server import TuneServer
from kernelopt.tune.workbench import Workbench

TRANSFORMER = REPO / "examples" / "models" / "tiny_transformer.py"


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    out = tmp_path_factory.mktemp("spots")
    assert main(["model", "extract", str(TRANSFORMER), "--top", "2", "--forwards", "2", "--out", str(out)]) == 0
    return out, json.loads((out / "manifest.json").read_text())


def tune_args(*argv):
    return build_parser().parse_args(["tune", *argv, "--model", "test-model", "--device", "cpu", "--no-browser",
                                      "--timing-budget", "1", "--correctness-trials", "2"])


def test_the_page_lists_the_spots_and_opens_another_in_a_new_run(extracted, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    folder, manifest = extracted
    modules = [p["module"] for p in manifest["problems"]]
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer([NO_CODE]) as llm:
        args = tune_args("--model-spots", str(folder), "--base-url", llm.url, "--store", str(store))
        spots = model_spots(args)   # no PROBLEM.py: the hottest spot's problem
        assert args.problem == str(folder / manifest["problems"][0]["file"])
        workbench = Workbench(open_session(args), spots=spots, open_problem=lambda path: open_spot_session(args, path))
        with TuneServer(workbench) as tune:
            status, state = call(f"{tune.base_url}/api/state", token=tune.token)
            assert status == 200 and state["spots"]["open"] == modules[0]
            assert [s["module"] for s in state["spots"]["spots"]] == modules
            assert [s["share"] for s in state["spots"]["spots"]] == [p["share"] for p in manifest["problems"]]
            first_run = state["run_id"]

            events = EventReader(f"{tune.base_url}/api/events?token={tune.token}")
            events.until("state")
            status, opened = call(f"{tune.base_url}/api/open-spot", {"module": modules[1]}, token=tune.token)
            assert status == 200 and opened["spots"]["open"] == modules[1] and opened["run_id"] != first_run
            assert opened["problem_path"] == str(folder / manifest["problems"][1]["file"])
            assert opened["candidates"] == []
            assert events.until("state", lambda s: s["run_id"] == opened["run_id"])

            # the opened spot is an ordinary problem: an exact copy of it is judged correct
            source = (folder / manifest["problems"][1]["file"]).read_text()
            copy = source + "\n\nclass ModelNew(Model):\n    pass\n"
            assert call(f"{tune.base_url}/api/submit", {"code": copy}, token=tune.token)[0] == 202
            judged = events.until("judged")[-1][1]
            assert judged["status"] == "correct", judged

            status, refused = call(f"{tune.base_url}/api/open-spot", {"module": "blocks.9"}, token=tune.token)
            assert status == 400 and "no extracted hot spot 'blocks.9'" in refused["error"] and modules[0] in refused["error"]
    runs = RunStore.open(store)
    try:
        assert runs.run(first_run)["status"] == "finished"      # the spot left is stored as finished
        assert runs.run(opened["run_id"])["status"] == "finished"
    finally:
        runs.close()


def test_a_workbench_without_spots_says_how_to_get_them(request):
    llm, tune = request.getfixturevalue("workbench")   # test_tune_server's: one problem, no --model-spots
    status, body = call(f"{tune.base_url}/api/open-spot", {"module": "x"}, token=tune.token)
    assert status == 400 and "--model-spots DIR" in body["error"]
    assert call(f"{tune.base_url}/api/state", token=tune.token)[1]["spots"] is None


def test_the_command_refuses_bad_spots(extracted, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    folder, manifest = extracted
    base = ["tune", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--no-browser"]
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "manifest.json").write_text('{"problems": [{"module": "a", "file": "../../etc/passwd"}]}')
    for argv, message in [(["--model-spots", str(tmp_path)], "no manifest.json"),
                          (["--model-spots", str(folder), "--spot", "blocks.9"], "not an extracted hot spot"),
                          (["--spot", "blocks.0.mlp"], "give --model-spots too"),
                          (["--model-spots", str(damaged)], "is not a file beside it")]:
        assert main(base + argv) == 2, argv
        assert message in capsys.readouterr().err, argv

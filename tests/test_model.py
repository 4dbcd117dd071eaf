"""`kernelopt model`: profile, extract, compose and optimize on the bundled example models, with
the real referee on the CPU (and the loopback LLM server for optimize). No assertion depends on
how fast this host is: timings are checked for structure and consistency only."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO
from llm_server import ScriptedLLMServer

from kernelopt.cli import main

MODELS = REPO / "examples" / "models"
TRANSFORMER = MODELS / "tiny_transformer.py"
CONVNET = MODELS / "tiny_convnet.py"
RETRIEVAL = MODELS / "tiny_retrieval.py"
CANDIDATES = MODELS / "replacements"
QUICK_EVAL = ["--device", "cpu", "--timing-budget", "1", "--correctness-trials", "2"]


def run_json(capsys, argv) -> dict:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out          # exactly one object
    return json.loads(lines[0])


@pytest.mark.parametrize("model", [TRANSFORMER, CONVNET], ids=["transformer", "convnet"])
def test_profile_attributes_the_forward_to_disjoint_submodules(capsys, model):
    import torch

    from kernelopt.model.loading import load_model

    threads = torch.get_num_threads()
    profile = run_json(capsys, ["model", "profile", str(model), "--json", "--forwards", "2"])
    module_paths = {path for path, _ in load_model(model).model.named_modules()}
    spots = profile["spots"]
    assert spots and profile["device"] == "cpu" and profile["forward_ms"] > 0
    paths = [s["path"] for s in spots]
    assert set(paths) <= module_paths and "" not in paths
    for a in paths:   # no spot inside another: their shares add up
        assert not any(b != a and b.startswith(a + ".") for b in paths), paths
    assert sum(s["share"] for s in spots) + profile["model_self_share"] <= 1.0 + 1e-3
    for s in spots:
        assert 0 < s["share"] <= 1 and s["calls"] == 1
        assert s["free_bound"] == pytest.approx(1 / (1 - s["share"]), rel=2e-3)
        assert s["half_bound"] == pytest.approx(1 / (1 - s["share"] / 2), rel=2e-3)
        assert s["inputs"] and all(a["dtype"] == "float32" for a in s["inputs"])
    batch = 4 if model == TRANSFORMER else 8
    assert all(s["inputs"][0]["shape"][0] == batch for s in spots)
    assert profile["threads"] == 1 and profile["unit"] == "thread cpu time"   # as the referee times
    assert torch.get_num_threads() == threads                                   # and restored


def test_profile_text_and_bad_input(capsys, tmp_path):
    assert main(["model", "profile", str(CONVNET), "--forwards", "1"]) == 0
    out = capsys.readouterr().out
    assert "share" in out and "if free" in out and "(model: outside every submodule)" in out
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    assert main(["model", "profile", str(broken)]) == 2
    assert "missing top-level definition of get_inputs" in capsys.readouterr().err
    assert main(["model", "profile", str(CONVNET), "--device", "tpu"]) == 2


@pytest.mark.parametrize("model", [TRANSFORMER, CONVNET], ids=["transformer", "convnet"])
def test_extracted_problems_are_healthy_and_judge_an_exact_copy_correct(capsys, tmp_path, model, fast_options):
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import Evaluator
    from kernelopt.sandbox.problem_health import check_health

    out = tmp_path / "spots"
    manifest = run_json(capsys, ["model", "extract", str(model), "--top", "2", "--out", str(out), "--json",
                                 "--forwards", "2"])
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert len(manifest["problems"]) + len(manifest["not_extracted"]) == 2
    assert manifest["problems"], manifest
    options = fast_options(correctness_trials=2, timing_budget=1.0)
    for row in manifest["problems"]:
        problem = load_problem(out / row["file"])
        assert f"`{row['module']}`" in problem.source and 0 < row["share"] <= 1
        assert row["inputs"][0]["shape"][0] == (4 if model == TRANSFORMER else 8) and row["signatures"] == 1
        copy = problem.source + "\n\nclass ModelNew(Model):\n    pass\n"
        with Evaluator(problem, options, keep_spare=False) as evaluator:
            health = check_health(evaluator, options)
            assert health.healthy, health.details
            result = evaluator.evaluate(copy)
        assert result.correct, result.message
    for row in manifest["not_extracted"]:
        assert row["reason"]


def write_model(tmp_path, body: str):
    path = tmp_path / "model.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n" + body + """

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = make()
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.ReLU())

    def forward(self, x):
        return self.seq(self.inner(x))


def get_inputs():
    return [torch.randn(2, 8)]


def get_init_inputs():
    return []
""")
    return path


@pytest.mark.parametrize("body, reason", [
    ("def make():\n    class Local(nn.Module):\n        def forward(self, x):\n            return x * 2\n"
     "    return Local()", "defined inside a function"),
    ("class Gate(nn.Module):\n    def forward(self, x):\n        if x.sum().item() > 0:\n"
     "            return x\n        return -x\n\n\ndef make():\n    return Gate()", "data-dependent control flow"),
    ("class Scaled(nn.Module):\n    def __init__(self, fn):\n        super().__init__()\n        self.fn = fn\n\n"
     "    def forward(self, x):\n        return self.fn(x)\n\n\ndef make():\n    return Scaled(lambda x: x + 1)",
     "cannot be written as a literal"),
])
def test_what_cannot_be_extracted_is_listed_with_the_reason(tmp_path, body, reason):
    from kernelopt.model.extract import extract_spots, write_extracted
    from kernelopt.model.loading import load_model
    from kernelopt.model.profiler import profile_model

    loaded = load_model(write_model(tmp_path, body))
    profile = profile_model(loaded, forwards=1, split=1.0)
    items = extract_spots(loaded, [profile.every["inner"], profile.every["seq"]])
    assert reason in items[0].reason and items[0].file is None
    manifest = json.loads(write_extracted(items, tmp_path / "out", "model.py", profile.to_json()).read_text())
    assert [r["module"] for r in manifest["not_extracted"]] == ["inner"]
    assert [r["module"] for r in manifest["problems"]] == ["seq"]


def test_a_sequential_is_extracted_with_its_modules_built_in(tmp_path, fast_options):
    """nn.Sequential(nn.Linear(8, 8), nn.ReLU()): modules as constructor arguments are written
    as their own constructor calls, inside the problem's Model; the problem judges a copy correct."""
    from kernelopt.kernelbench import problem_from_source
    from kernelopt.model.extract import extract_spots
    from kernelopt.model.loading import load_model
    from kernelopt.model.profiler import profile_model
    from kernelopt.sandbox import evaluate

    loaded = load_model(write_model(tmp_path, "def make():\n    return nn.Identity()"))
    profile = profile_model(loaded, forwards=1, split=1.0)
    seq, linear = extract_spots(loaded, [profile.every["seq"], profile.every["seq.0"]])
    assert "class Model(_SpotSequential)" in seq.source and seq.init_args == []
    assert seq.constructor == "_SpotSequential(_SpotLinear(8, 8), _SpotReLU())"
    assert "class Model(_SpotLinear)" in linear.source and linear.init_args == [8, 8]
    problem = problem_from_source(seq.source, path="seq.py")
    result = evaluate(problem, seq.source + "\n\nclass ModelNew(Model):\n    pass\n",
                      fast_options(correctness_trials=2, timing_budget=0.5))
    assert result.correct, result.message


def test_a_spot_called_with_several_sizes_is_extracted_with_each_as_a_configuration(tmp_path, fast_options):
    """The model calls one MLP on whole rows, twice, and on half-length rows: the extracted problem
    declares the most frequent size as its own constants and the other as a configuration, and
    an exact copy is judged correct on both."""
    from kernelopt.kernelbench import problem_from_source
    from kernelopt.model.extract import extract_spots
    from kernelopt.model.loading import load_model
    from kernelopt.model.profiler import profile_model
    from kernelopt.sandbox import evaluate

    path = tmp_path / "model.py"
    path.write_text("""import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(16, 16), nn.GELU())

    def forward(self, x):
        return self.mlp(x) + self.mlp(x * 2) + self.mlp(x[:, :6]).sum()


def get_inputs():
    return [torch.randn(4, 10, 16)]


def get_init_inputs():
    return []
""")
    loaded = load_model(path)
    profile = profile_model(loaded, forwards=1, split=1.0)
    [mlp] = extract_spots(loaded, [profile.every["mlp"]])
    problem = problem_from_source(mlp.source, path="mlp.py")
    assert [s.name for s in problem.shapes] == ["default", "input0_shape=(4, 6, 16)"]
    assert "input0_shape = (4, 10, 16)" in mlp.source and mlp.manifest_row()["shapes"] == 2
    result = evaluate(problem, mlp.source + "\n\nclass ModelNew(Model):\n    pass\n",
                      fast_options(correctness_trials=2, timing_budget=0.5))
    assert result.correct, result.message
    assert [s.status for s in result.shapes] == ["correct", "correct"]


def test_compose_keeps_a_good_replacement_and_drops_one_wrong_in_context(capsys, tmp_path):
    """The non-contiguous Linear is correct alone (same values) but the attention views its output
    as contiguous: the end-to-end check catches it, and the composition is retried without it."""
    from kernelopt.kernelbench import load_problem
    from kernelopt.model.profiler import combined_amdahl
    from kernelopt.sandbox import EvalOptions, evaluate

    out = tmp_path / "optimized.py"
    report = run_json(capsys, [
        "model", "compose", str(TRANSFORMER), "--forwards", "2", "--json", "--out", str(out), *QUICK_EVAL,
        "--replace", f"blocks.0.attn={CANDIDATES / 'attention_sdpa.py'}",
        "--replace", f"blocks.1.attn.qkv={CANDIDATES / 'linear_noncontiguous.py'}"])
    rows = {r["module"]: r for r in report["spots"]}
    assert rows["blocks.0.attn"]["survived"] and rows["blocks.0.attn"]["speedup_alone"] > 0
    qkv = rows["blocks.1.attn.qkv"]
    assert qkv["speedup_alone"] is not None and qkv["alone"] == "correct"
    assert not qkv["survived"] and "view size is not compatible" in qkv["dropped_reason"]
    e2e = report["end_to_end"]
    assert e2e["correct"] and e2e["speedup"] > 0 and report["optimized"] == str(out)
    lo, hi = e2e["interval"]
    assert lo <= e2e["speedup"] <= hi
    attn = rows["blocks.0.attn"]
    assert report["amdahl_prediction"] == pytest.approx(combined_amdahl([(attn["share"], attn["speedup_alone"])]),
                                                        rel=1e-3)
    # the written file is a candidate for the model itself, judged correct on its own
    verdict = evaluate(load_problem(TRANSFORMER), out.read_text(),
                       EvalOptions(device="cpu", timing_budget=1.0, correctness_trials=2))
    assert verdict.correct, verdict.message
    assert "replacement_" in out.read_text() and "_REPLACEMENTS" in out.read_text()


def amdahl(share: float, speedup: float) -> float:
    return 1.0 / (1.0 - share + share / speedup)


def test_removing_wasted_work_in_one_submodule_speeds_the_model_up_as_amdahl_predicts(capsys, tmp_path):
    """tiny_retrieval's `normalize` computes the whole Gram matrix to read its diagonal; the
    hand-written replacement sums the squares. The end-to-end speedup's 95 % interval must meet
    what Amdahl's law predicts from the spot's share and its speedup alone, each given the room
    a loaded 2-core host needs: the speedup alone within a factor 2, the end-to-end interval
    widened by a factor 1.25, the share -0.1 below and +0.3 above. The upper side is loose on
    purpose: under load the reference's Gram matrix (4 MiB written per call) loses more to cache
    and memory contention than the rest of the model, so its share of the referee's wall time
    grows past the profiled one (at load average 6 on 2 cores: 3.45x [2.80, 4.10] measured where
    1.71x was predicted; quiet: 1.98x [1.82, 2.14] against 1.86x). The lower side is the
    acceptance: with share 0.5 and 7x alone it is 1.4x, so a replacement that lost its speedup
    in context (near 1x, with an interval as narrow as a quiet host gives) fails."""
    report = run_json(capsys, [
        "model", "compose", str(RETRIEVAL), "--forwards", "5", "--json", "--out", str(tmp_path / "o.py"),
        "--device", "cpu", "--timing-budget", "1.5", "--correctness-trials", "2",
        "--replace", f"normalize={CANDIDATES / 'normalize_rownorm.py'}"])
    (spot,) = report["spots"]
    share, alone = spot["share"], spot["speedup_alone"]
    assert spot["survived"] and spot["alone"] == "correct" and alone > 1
    assert 0.2 < share < 0.9, share     # the Gram matrix is the model's largest piece of work by far
    e2e = report["end_to_end"]
    assert e2e["correct"], e2e
    assert report["amdahl_prediction"] == pytest.approx(amdahl(share, alone), rel=1e-3)
    low = amdahl(max(0.0, share - 0.1), max(1.0, alone / 2))
    high = amdahl(min(0.95, share + 0.3), alone * 2)
    measured_low, measured_high = e2e["interval"]
    assert measured_low / 1.25 <= high and measured_high * 1.25 >= low, (
        f"end to end {e2e['speedup']:.3f}x [{measured_low:.3f}, {measured_high:.3f}] outside Amdahl's "
        f"[{low:.3f}, {high:.3f}] (share {share:.3f}, alone {alone:.3f}x)")


def test_compose_rejects_bad_replacements_before_any_work(capsys, tmp_path):
    good = CANDIDATES / "attention_sdpa.py"
    cases = [([f"blocks.0.attn{good}"], "PATH=CANDIDATE.py"),
             ([f"blocks.9.attn={good}"], "no submodule `blocks.9.attn`"),
             ([f"blocks.0={good}", f"blocks.0.attn={good}"], "is inside `blocks.0`"),
             ([f"blocks.0.attn={tmp_path / 'missing.py'}"], "file not found")]
    for replaces, message in cases:
        argv = ["model", "compose", str(TRANSFORMER), "--out", str(tmp_path / "o.py"), *QUICK_EVAL]
        for r in replaces:
            argv += ["--replace", r]
        assert main(argv) == 2
        assert message in capsys.readouterr().err


def exact_copy_reply(body: dict, index: int) -> str:
    """The loopback LLM's answer: the reference it was shown, as ModelNew (always correct)."""
    text = "\n".join(str(m["content"]) for m in body["messages"])
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    reference = next(b for b in blocks if "def get_init_inputs" in b and "ModelNew" not in b)
    return f"Here it is.\n```python\n{reference}\n\nclass ModelNew(Model):\n    pass\n```\n"


@pytest.mark.parametrize("model", [TRANSFORMER, CONVNET], ids=["transformer", "convnet"])
def test_optimize_searches_each_spot_and_composes_the_winners(capsys, tmp_path, monkeypatch, model):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with ScriptedLLMServer(exact_copy_reply) as server:
        report = run_json(capsys, [
            "model", "optimize", str(model), "--top", "2", "--forwards", "2", "--model", "test-model",
            "--base-url", server.url, "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"),
            "--budget", "2", "--strategy", "refine", "--json", "--quiet", *QUICK_EVAL])
        assert not server.script_errors
    runs = report["runs"]
    assert runs and sum(r["llm_calls"] for r in runs) == max(2, len(runs))
    assert all(r["best_speedup"] for r in runs)
    assert report["end_to_end"]["correct"], report["end_to_end"]
    assert all(r["survived"] for r in report["spots"])
    assert (tmp_path / "run" / "optimized.py").is_file() and (tmp_path / "run" / "report.json").is_file()
    assert json.loads((tmp_path / "run" / "problems" / "manifest.json").read_text())["problems"]
    # kernelopt report on the run folder: the hot spots' section with this run's own numbers
    assert main(["report", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    html = (tmp_path / "run" / "report.html").read_text()
    assert '<section id="model">' in html and "End to end against Amdahl" in html
    for spot in report["spots"]:
        assert f"<td>{spot['module']}</td><td>{spot['share']:.1%}</td>" in html
        assert f"{spot['speedup_alone']:.2f}x" in html
    assert f"{report['end_to_end']['speedup']:.2f}x" in html and f"{report['amdahl_prediction']:.2f}x" in html


def test_a_whole_model_run_resumes_with_a_bigger_budget(capsys, tmp_path, monkeypatch):
    """No code in the first answers: nothing to compose. --resume with a bigger --budget
    continues each spot's run from the store (the answers given are replayed, not asked again)
    and composes what the new calls found."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    argv = ["model", "optimize", str(TRANSFORMER), "--forwards", "2", "--store", str(tmp_path / "s.sqlite"),
            "--out", str(tmp_path / "run"), "--json", "--quiet", *QUICK_EVAL]
    with ScriptedLLMServer(["I am not sure how to make this faster."]) as server:
        first = run_json(capsys, argv[:3] + ["--top", "1", "--model", "test-model", "--base-url", server.url,
                                             "--budget", "1"] + argv[3:])
    assert first["end_to_end"]["status"] == "nothing composed" and first["optimized"] is None
    assert first["runs"][0]["best_speedup"] is None
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert [s["run_id"] for s in plan["spots"]] == [first["runs"][0]["run_id"]]
    with ScriptedLLMServer(exact_copy_reply) as server:
        second = run_json(capsys, argv + ["--resume", "--budget", "2", "--base-url", server.url])
        assert server.answered() == 1     # the first call came from the store
    assert second["runs"][0]["run_id"] == first["runs"][0]["run_id"] and second["runs"][0]["llm_calls"] == 2
    assert second["runs"][0]["best_speedup"] and second["end_to_end"]["correct"]
    assert main(["model", "optimize", str(TRANSFORMER), "--resume", "--out", str(tmp_path / "none")]) == 2


def test_the_budget_is_shared_by_share_of_time():
    from kernelopt.cli.model_optimize import share_budget

    assert share_budget(10, [0.5, 0.3, 0.2]) == [5, 3, 2]
    assert share_budget(2, [0.6, 0.3, 0.1]) == [1, 1, 1]   # at least one each
    assert sum(share_budget(7, [0.45, 0.35, 0.2])) == 7


@pytest.mark.gpu
def test_profile_and_compose_on_cuda(capsys, tmp_path):
    profile = run_json(capsys, ["model", "profile", str(TRANSFORMER), "--device", "cuda", "--json"])
    assert profile["unit"] == "device time" and profile["spots"]
    report = run_json(capsys, [
        "model", "compose", str(TRANSFORMER), "--device", "cuda", "--json", "--out", str(tmp_path / "o.py"),
        "--timing-budget", "2", "--replace", f"blocks.0.attn={CANDIDATES / 'attention_sdpa.py'}"])
    assert report["end_to_end"]["correct"], report["end_to_end"]


def test_the_report_gives_each_spot_its_fate_and_amdahls_prediction():
    from kernelopt.model.compose import Composition
    from kernelopt.model.report import composition_report, composition_text
    from kernelopt.sandbox import EvalResult

    verdict = EvalResult(status="correct", correct=True, speedup=1.2)
    composition = Composition("source", ["a"], {"b": "runtime_error: view size is not compatible"}, verdict)
    report = composition_report([{"module": "a", "share": 0.5, "speedup_alone": 2.0, "alone": "correct"},
                                 {"module": "b", "share": 0.2, "speedup_alone": 1.5, "alone": "correct"},
                                 {"module": "c", "share": 0.1, "speedup_alone": None, "alone": "incorrect"}],
                                composition, "m")
    assert report["amdahl_prediction"] == pytest.approx(1 / (0.5 + 0.5 / 2.0), abs=1e-4)   # the kept spot only
    assert [r["survived"] for r in report["spots"]] == [True, False, False]
    text = composition_text(report)
    assert "kept" in text and "dropped (runtime_error: view size" in text and "incorrect" in text
    assert "end to end: correct, speedup 1.200x" in text and "1.333x" in text


def test_profile_keeps_the_profiler_s_native_chatter_off_stderr():
    """kineto writes `USDT:... profiler_start/stop` lines to the process's stderr at every run;
    stderr is for kernelopt's messages (what a program prints there still gets through)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "kernelopt", "model", "profile",
                           str(REPO / "examples" / "models" / "tiny_retrieval.py"), "--device", "cpu", "--forwards", "2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "normalize" in done.stdout and "USDT" not in done.stderr


def test_the_chatter_filter_passes_everything_else_through(capfd):
    import os

    from kernelopt.model.profiler import without_profiler_chatter

    with without_profiler_chatter():
        os.write(2, b"USDT:2026-11-28 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a warning of the program's\n")
    assert capfd.readouterr().err == "a warning of the program's\n"


def test_a_training_profile_counts_each_backward_op_for_the_module_whose_forward_made_it(capsys, tmp_path):
    """A model whose second block is cheap forward and costly backward (a custom Function that
    spins in its backward): profiled as training steps, that block's share grows past the
    forward-only profile's, and its extracted problem asks to be judged as a training step."""
    path = tmp_path / "model.py"
    path.write_text('''import torch
import torch.nn as nn


class SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        for _ in range(200):
            g = g * 1.0001 / 1.0001
        return g * 2


class Heavy(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        for _ in range(8):
            x = torch.tanh(self.linear(x))
        return x


class Light(nn.Module):
    def forward(self, x):
        return SlowBackward.apply(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.heavy = Heavy(256)
        self.light = Light()

    def forward(self, x):
        return self.light(self.heavy(x))


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
''')
    forward = run_json(capsys, ["model", "profile", str(path), "--forwards", "3", "--json"])
    training = run_json(capsys, ["model", "profile", str(path), "--forwards", "3", "--pass", "both", "--json"])
    share = {run: {s["path"]: s["share"] for s in found["spots"]} for run, found in (("f", forward), ("t", training))}
    assert share["t"]["light"] > 2 * share["f"]["light"] and share["t"]["light"] > 0.2, share
    out = tmp_path / "spots"
    manifest = run_json(capsys, ["model", "extract", str(path), "--top", "1", "--pass", "both", "--out", str(out),
                                 "--forwards", "2", "--json"])
    from kernelopt.kernelbench import load_problem

    assert load_problem(out / manifest["problems"][0]["file"]).training_pass == "both"

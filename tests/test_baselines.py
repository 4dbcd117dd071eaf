"""Baselines: PyTorch's own modes judged by the referee like candidates, stored and reused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

from kernelopt.bench.baselines import BaselineStore, baseline_source, default_names, store_key
from kernelopt.kernelbench import load_problem, problem_from_source
from kernelopt.sandbox import EvalOptions


@pytest.fixture
def relu_set(tmp_path):
    folder = tmp_path / "set" / "level1"
    folder.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "level1" / "1_ReLU.py", folder / "1_ReLU.py")
    return folder.parent


def baselines(problem_set, store, *extra, device="cpu"):
    return subprocess.run([sys.executable, "-m", "kernelopt", "baselines", "--kernelbench",
                           str(problem_set), "--store", str(store), "--device", device, "--timing-budget", "1",
                           "--json", *extra], capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_compile_is_judged_stored_and_reused(relu_set, tmp_path):
    store = tmp_path / "baselines.json"
    first = baselines(relu_set, store, "--baselines", "eager,compile")
    assert first.returncode == 0, first.stderr
    measured = json.loads(first.stdout)["problems"][0]["baselines"]
    assert measured["compile"]["status"] == "correct", measured["compile"]
    assert measured["compile"]["speedup_vs_eager"] > 0 and measured["compile"]["ms"] > 0
    assert measured["eager"] == {**measured["eager"], "speedup_vs_eager": 1.0, "status": "correct"}
    assert measured["eager"]["ms"] > 0
    assert "1_ReLU" not in first.stdout or "compile correct" in first.stderr
    again = baselines(relu_set, store, "--baselines", "eager,compile")
    assert again.returncode == 0 and again.stderr == "", "the second run measures nothing"
    assert json.loads(again.stdout)["problems"][0]["baselines"] == measured


def test_unknown_and_gpu_only_baselines_are_usage_errors(relu_set, tmp_path):
    done = baselines(relu_set, tmp_path / "s.json", "--baselines", "compile,turbo")
    assert done.returncode == 2 and "unknown baseline(s) turbo" in done.stderr
    done = baselines(relu_set, tmp_path / "s.json", "--baselines", "cuda-graphs")
    assert done.returncode == 2 and "need a CUDA device" in done.stderr
    assert default_names("cpu") == ["eager", "compile"]
    assert "cuda-graphs" in default_names("cuda:0")


def test_the_store_key_follows_the_problem_and_the_device(example):
    problem = load_problem(example("1_ReLU"))
    changed = problem_from_source(problem.source.replace("dim = 4096", "dim = 8192"), path=problem.path)
    options = EvalOptions()
    assert store_key(problem, options, "cpu") == store_key(problem, options, "cpu")
    assert store_key(problem, options, "cpu") != store_key(changed, options, "cpu")
    assert store_key(problem, options, "cpu") != store_key(problem, options, "cuda:0")


def test_a_broken_store_write_never_leaves_half_a_file(tmp_path):
    store = BaselineStore(tmp_path / "b.json")
    store.put("k", "compile", {"status": "correct"})
    assert json.loads((tmp_path / "b.json").read_text()) == {"k": {"compile": {"status": "correct"}}}
    assert BaselineStore(tmp_path / "b.json").get("k") == {"compile": {"status": "correct"}}
    assert not (tmp_path / "b.tmp").exists()


def test_baseline_sources_wrap_the_reference(example):
    problem = load_problem(example("1_ReLU"))
    compiled = baseline_source(problem, "compile-max-autotune-no-cudagraphs")
    assert compiled.startswith(problem.source.rstrip()) and "mode='max-autotune-no-cudagraphs'" in compiled
    assert "torch.cuda.CUDAGraph()" in baseline_source(problem, "cuda-graphs")
    with pytest.raises(ValueError):
        baseline_source(problem, "eager")


@pytest.mark.gpu
def test_every_baseline_is_correct_on_a_gpu(relu_set, tmp_path):
    done = baselines(relu_set, tmp_path / "gpu.json", device="cuda")
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)["problems"][0]["baselines"]
    assert {name: record["status"] for name, record in measured.items()} == {
        "eager": "correct", "compile": "correct", "compile-max-autotune-no-cudagraphs": "correct",
        "compile-reduce-overhead": "correct", "cuda-graphs": "correct"}

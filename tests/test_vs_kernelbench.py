"""benchmarks/vs_kernelbench.py: KernelBench's evaluator and ours on the same candidates.

KernelBench itself is external (and asserts CUDA), so a stand-in clone is made here: a
`src/kernelbench/eval.py` whose `eval_kernel_against_ref` has KernelBench's signature and result
fields and judges on the CPU the simple way published harnesses do (one input set, reference
first, then the candidate on the same tensors; mean call times). Our side runs for real through
`kernelopt bench`. The release file is our own (examples/level1/1_ReLU.py and candidates
written here)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import REPO

RELU = (REPO / "examples" / "level1" / "1_ReLU.py").read_text()
SCRIPT = REPO / "benchmarks" / "vs_kernelbench.py"

SLOW_RELU = ("import time\nimport torch\nclass ModelNew(torch.nn.Module):\n"
             "    def forward(self, x):\n        time.sleep(0.003)\n        return torch.relu(x)\n")
WRONG_RELU = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
              "        return torch.relu(x) * 2\n")
# Overwrites its input: the stand-in (like harnesses that reuse one input set) calls it correct; ours rejects it.
INPLACE_RELU = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu_()\n"
# Kills the process that loads it: their in-process evaluator dies; the run must go on.
KILLS_ITS_PROCESS = "import os\nos._exit(3)\n"

STAND_IN_EVAL = textwrap.dedent('''
    import time
    import torch
    from dataclasses import dataclass, field

    @dataclass
    class KernelExecResult:
        compiled: bool = False
        correctness: bool = False
        metadata: dict = field(default_factory=dict)
        runtime: float = -1.0
        ref_runtime: float = -1.0

    def _load(source, name):
        scope = {}
        exec(compile(source, name, "exec"), scope)
        return scope

    def _mean_us(model, inputs, trials):
        started = time.perf_counter()
        for _ in range(trials):
            model(*inputs)
        return (time.perf_counter() - started) / trials * 1e6

    def eval_kernel_against_ref(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                                num_perf_trials=10, measure_performance=False, timing_method="cuda_event",
                                verbose=False, build_dir=None, device=None, backend="cuda",
                                precision=torch.float32, check_for_excessive_speedup=True,
                                excessive_speedup_threshold=10):
        reference = _load(original_model_src, "ref")
        try:
            custom = _load(custom_model_src, "custom")
            model_new = custom["ModelNew"](*reference["get_init_inputs"]())
        except Exception as exc:
            return KernelExecResult(metadata={"compilation_error": repr(exc)})
        torch.manual_seed(seed_num)
        inputs = reference["get_inputs"]()
        model = reference["Model"](*reference["get_init_inputs"]())
        expected = model(*inputs)
        got = model_new(*inputs)
        if not torch.allclose(expected, got, atol=1e-2, rtol=1e-2):
            return KernelExecResult(compiled=True, metadata={"correctness_issue": "Output mismatch"})
        result = KernelExecResult(compiled=True, correctness=True)
        if measure_performance:
            result.runtime = _mean_us(model_new, inputs, num_perf_trials)
            result.ref_runtime = _mean_us(model, inputs, num_perf_trials)
        return result
''')


def stand_in_kernelbench(root):
    package = root / "src" / "kernelbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "eval.py").write_text(STAND_IN_EVAL)
    return root


def release(path):
    entries = [(SLOW_RELU, 3.0), (WRONG_RELU, 2.0), (INPLACE_RELU, 4.0), (KILLS_ITS_PROCESS, 9.0)]
    path.write_text("".join(json.dumps({"level_id": 1, "task_id": 1, "ref_code": RELU, "custom_code": code,
                                        "score_default": score}) + "\n" for code, score in entries))
    return path


def run(tmp_path, out):
    command = [sys.executable, str(SCRIPT), "--kernelbench", str(tmp_path / "KernelBench"),
               "--solutions", str(tmp_path / "h100.json"), "--out", str(out), "--device", "cpu",
               "--timing-budget", "1", "--perf-trials", "20", "--timeout", "120"]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def test_both_evaluators_judge_the_same_candidates_and_the_disagreements_are_explained(tmp_path):
    stand_in_kernelbench(tmp_path / "KernelBench")
    release(tmp_path / "h100.json")
    out = tmp_path / "out"
    result = run(tmp_path, out)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "vs_kernelbench.json").read_text())
    assert report["n_judged_by_both"] == 4
    rows = {row["their_outcome"]: row for row in report["rows"]}
    theirs = sorted(row["their_outcome"] for row in report["rows"])
    assert theirs == ["correct", "correct", "crashed", "incorrect"]
    by_code = {row["key"]: row for row in report["rows"]}
    statuses = sorted(row["our_status"] for row in by_code.values())
    assert statuses.count("correct") == 1 and "incorrect" in statuses
    # The in-place candidate: correct for them, never correct for us, and the row says why.
    disagreements = report["disagreements"]
    assert len(disagreements) == 1
    assert disagreements[0]["their_outcome"] == "correct" and disagreements[0]["our_status"] != "correct"
    assert disagreements[0]["our_flags"] or disagreements[0]["our_message"]
    assert report["agreement"] == 0.75
    assert "exit 3" in rows["crashed"]["their_detail"]
    # Both sides timed the slow candidate (it sleeps 3 ms a call against a microsecond reference).
    both = report["both_correct"]
    assert both["count"] == 1 and both["our_geomean"] < 0.5 and both["their_geomean"] < 0.5
    assert report["candidates_per_hour"]["ours"] > 0 and report["candidates_per_hour"]["theirs"] > 0
    markdown = (out / "vs_kernelbench.md").read_text()
    assert "| ours \\ theirs |" in markdown and "## Disagreements" in markdown

    # A rerun into the same folder resumes both sides: nothing is judged again.
    their_log = (out / "kernelbench.jsonl").read_text()
    our_log = (out / "ours" / "results.jsonl").read_text()
    again = run(tmp_path, out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "kernelbench.jsonl").read_text() == their_log
    assert (out / "ours" / "results.jsonl").read_text() == our_log


def test_a_folder_that_is_no_kernelbench_clone_is_refused(tmp_path):
    release(tmp_path / "h100.json")
    (tmp_path / "KernelBench").mkdir()
    result = run(tmp_path, tmp_path / "out")
    assert result.returncode != 0 and "no src/ folder" in result.stderr

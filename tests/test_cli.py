"""`kernelopt eval` through the installed console script, as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

FAST = ["--device", "cpu", "--timing-budget", "1"]


def kernelopt(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("kernelopt", path=str(Path(sys.executable).parent)) or "kernelopt"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def test_json_mode_prints_exactly_one_object_with_the_contract_fields(example):
    run = kernelopt("eval", "--reference", str(example("1_ReLU")),
                    "--candidate", "examples/candidates/1_ReLU/relu_clamp.py", "--json", *FAST)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)  # the whole of stdout is one JSON document
    assert isinstance(result, dict)
    for field in ("status", "correct", "speedup", "reference_ms", "candidate_ms", "message",
                  "trials", "timing", "checks", "isolation", "environment"):
        assert field in result
    assert result["status"] == "correct" and result["correct"] is True
    assert result["speedup"] > 0 and result["reference_ms"] > 0 and result["candidate_ms"] > 0
    assert len(result["trials"]) == 5 and all(t["passed"] for t in result["trials"])
    assert result["timing"]["candidate"]["samples"] >= 10
    assert result["environment"]["torch"] and result["environment"]["device"] == "cpu"
    assert result["profile"] is None  # profiled only with --profile
    assert result["isolation"]["backend"] in ("bubblewrap", "unshare", "none")


def test_a_wrong_candidate_is_a_verdict_with_exit_zero(example, tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import torch\nclass ModelNew(torch.nn.Module):\n"
                     "    def forward(self, x):\n        return x * 2\n")
    run = kernelopt("eval", "--reference", str(example("1_ReLU")), "--candidate", str(wrong),
                    "--json", "--correctness-trials", "2", *FAST)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "incorrect" and result["speedup"] is None and not result["correct"]
    assert result["trials"][0]["max_abs_error"] > 0.01


def test_human_readable_output(example):
    run = kernelopt("eval", "--reference", str(example("1_ReLU")),
                    "--candidate", "examples/candidates/1_ReLU/relu_clamp.py", *FAST)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("correct  speedup") and "isolation:" in run.stdout


@pytest.mark.parametrize("args, complaint", [
    (["--reference", "missing.py", "--candidate", "examples/candidates/1_ReLU/relu_clamp.py"], "file not found"),
    (["--reference", "examples/level1/1_ReLU.py", "--candidate", "missing.py"], "file not found"),
    (["--reference", "examples/level1/1_ReLU.py", "--candidate", "examples/candidates/1_ReLU/relu_clamp.py",
      "--device", "tpu"], "invalid device"),
    (["--reference", "examples/level1/1_ReLU.py", "--candidate", "examples/candidates/1_ReLU/relu_clamp.py",
      "--memory-limit", "lots"], "invalid size"),
])
def test_unusable_input_exits_2_with_a_message_on_stderr_and_one_json_object(args, complaint):
    run = kernelopt("eval", *args, "--json")
    assert run.returncode == 2
    assert complaint in run.stderr
    assert _one_json_failure(run.stdout, "bad_input", complaint)


def _one_json_failure(stdout: str, kind: str, complaint: str) -> bool:
    """stdout is exactly one JSON object saying the command failed, of `kind`, with `complaint`."""
    failure = json.loads(stdout)  # one object: json.loads refuses anything after it
    return failure["ok"] is False and failure["error"] == kind and complaint in failure["message"] and \
        failure["exit_status"] == 2 and failure["command"] == "eval"


def test_a_command_line_json_cannot_parse_still_gets_one_json_object():
    run = kernelopt("eval", "--json", "--reference", "examples/level1/1_ReLU.py")
    assert run.returncode == 2 and "--candidate" in run.stderr
    assert _one_json_failure(run.stdout, "bad_input", "required")
    plain = kernelopt("eval", "--reference", "examples/level1/1_ReLU.py")
    assert plain.returncode == 2 and plain.stdout == ""  # without --json, stdout stays empty


def test_broken_problem_exits_2_naming_the_file(tmp_path):
    broken = tmp_path / "9_Broken.py"
    broken.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    run = kernelopt("eval", "--reference", str(broken), "--candidate",
                    "examples/candidates/1_ReLU/relu_clamp.py", "--json")
    assert run.returncode == 2
    assert str(broken) in run.stderr and "get_inputs" in run.stderr


def test_reference_whose_get_inputs_raises_exits_2(tmp_path):
    broken = tmp_path / "9_Raises.py"
    broken.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                      "def get_inputs():\n    raise RuntimeError('no inputs today')\n"
                      "def get_init_inputs():\n    return []\n")
    run = kernelopt("eval", "--reference", str(broken), "--candidate",
                    "examples/candidates/1_ReLU/relu_clamp.py", "--json", *FAST)
    assert run.returncode == 2
    assert str(broken) in run.stderr and "no inputs today" in run.stderr


def test_a_failing_reference_s_traceback_points_into_the_user_s_file(tmp_path):
    """The worker runs a copy of the problem; its frames are named as the user's file, with the
    file's own line numbers. A configuration of a multi-shape problem is derived source (other
    lines): its frames keep the copy's name."""
    broken = tmp_path / "9_FailsInForward.py"
    body = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
            "        return x @ torch.ones(3, 3)\n"
            "def get_inputs():\n    return [torch.randn(4, 5)]\ndef get_init_inputs():\n    return []\n")
    broken.write_text(body)
    run = kernelopt("eval", "--reference", str(broken), "--candidate",
                    "examples/candidates/1_ReLU/relu_clamp.py", "--json", *FAST)
    assert run.returncode == 2
    assert f'File "{broken}", line 4, in forward' in run.stderr and "/reference/problem.py" not in run.stderr
    shaped = tmp_path / "9_ShapedFails.py"
    shaped.write_text(body.replace("torch.randn(4, 5)", "torch.randn(N, 5)") + "N = 4\nSHAPES = [{'N': 6}, {'N': 8}]\n")
    run = kernelopt("eval", "--reference", str(shaped), "--candidate",
                    "examples/candidates/1_ReLU/relu_clamp.py", "--json", *FAST)
    assert run.returncode == 2 and "/reference/problem.py" in run.stderr and f'File "{shaped}"' not in run.stderr


def test_size_parser():
    from kernelopt.cli.options import parse_size

    assert parse_size("8G") == 8 << 30 and parse_size("512M") == 512 << 20
    assert parse_size("1.5GiB") == int(1.5 * (1 << 30)) and parse_size("1000") == 1000


# ---------------------------------------------------------------------------------------------
# Batch form: several --candidate paths, or a directory of them

WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def test_batch_json_prints_one_object_per_line_with_its_candidate(example, tmp_path):
    folder = tmp_path / "candidates"
    folder.mkdir()
    (folder / "b_wrong.py").write_text(WRONG)
    shutil.copyfile(REPO / "examples/candidates/1_ReLU/relu_clamp.py", folder / "a_clamp.py")
    (folder / "notes.txt").write_text("not a candidate")
    single = tmp_path / "wrong_too.py"
    single.write_text(WRONG + "# another\n")
    run = kernelopt("eval", "--reference", str(example("1_ReLU")), "--candidate", str(single), str(folder),
                    "--json", "--correctness-trials", "2", *FAST)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 3, run.stdout
    results = {}
    for line in lines:
        record = json.loads(line)  # each line is one JSON document
        assert isinstance(record, dict) and "status" in record and "trials" in record
        results[record["candidate"]] = record
    # The directory stands for its *.py files, in sorted order; the .txt is not a candidate.
    assert set(results) == {str(single), str(folder / "a_clamp.py"), str(folder / "b_wrong.py")}
    assert results[str(folder / "a_clamp.py")]["status"] == "correct"
    assert results[str(folder / "a_clamp.py")]["speedup"] > 0
    assert results[str(folder / "b_wrong.py")]["status"] == "incorrect"
    assert results[str(single)]["status"] == "incorrect"


def test_batch_without_json_prints_a_block_per_candidate(example, tmp_path):
    paths = []
    for name in ("one.py", "two.py"):
        paths.append(tmp_path / name)
        paths[-1].write_text(WRONG + f"# {name}\n")
    run = kernelopt("eval", "--reference", str(example("1_ReLU")), "--candidate", *map(str, paths),
                    "--correctness-trials", "1", "--jobs", "1", *FAST)
    assert run.returncode == 0, run.stderr
    blocks = [b for b in run.stdout.split("\n\n") if b.strip()]
    assert sorted(b.splitlines()[0] for b in blocks) == sorted(f"== {p}" for p in paths)
    assert all(b.splitlines()[1].startswith("incorrect") for b in blocks)


@pytest.mark.parametrize("extra, complaint", [
    (["missing.py"], "missing.py: file not found"),
    (["examples"], "no *.py files"),  # a directory without candidates (only subfolders and a README)
])
def test_batch_refuses_an_unusable_candidate_before_any_work(extra, complaint):
    run = kernelopt("eval", "--reference", "examples/level1/1_ReLU.py", "--candidate",
                    "examples/candidates/1_ReLU/relu_clamp.py", *extra, "--json")
    assert run.returncode == 2
    assert complaint in run.stderr and _one_json_failure(run.stdout, "bad_input", complaint)

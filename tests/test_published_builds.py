"""benchmarks/published_builds.py: every candidate of a release in CUDA-L1's format built by our
own builder, without a GPU. The release is our own (examples/level1/1_ReLU.py and candidates
written here). A C++ extension builds with the CPU build of torch too, so the whole path (the
sandboxed capture of the load_inline call, the host build, the report) runs here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

RELU = (REPO / "examples" / "level1" / "1_ReLU.py").read_text()
SCRIPT = REPO / "benchmarks" / "published_builds.py"
CPP_RELU = (REPO / "tests" / "adversarial" / "honest" / "relu_cpp_extension.py").read_text()
BROKEN_CPP = CPP_RELU.replace("kernelopt_adv_relu_cpu", "kernelopt_broken_relu").replace(
    "return out;", "return out  // a missing semicolon")
PYTORCH_ONLY = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
# Builds only once it sees a CUDA tensor: the CPU never takes that path.
CUDA_PATH_ONLY = ("import torch\nfrom torch.utils.cpp_extension import load_inline\n"
                  "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                  "        if x.is_cuda:\n            load_inline(name='never_here', cpp_sources='', functions=[])\n"
                  "        return torch.relu(x)\n")


@pytest.mark.slow
def test_each_candidate_is_captured_in_the_sandbox_and_built_by_the_host(tmp_path):
    candidates = [CPP_RELU, BROKEN_CPP, PYTORCH_ONLY, CUDA_PATH_ONLY]
    release = tmp_path / "h100.json"
    release.write_text("".join(json.dumps({"level_id": 1, "task_id": 1, "ref_code": RELU, "custom_code": code,
                                           "score_default": 2.0}) + "\n" for code in candidates))
    out = tmp_path / "out"
    command = [sys.executable, str(SCRIPT), "--solutions", str(release), "--out", str(out),
               "--cache", str(tmp_path / "cache")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "builds.jsonl").read_text().splitlines()]
    by_sample = {r["sample"]: r for r in records}
    assert [by_sample[i]["outcome"] for i in range(4)] == ["builds", "fails", "no_extension", "gpu_path_only"]
    built = by_sample[0]["builds"]
    assert [b["name"] for b in built] == ["kernelopt_adv_relu_cpu"] and not built[0]["cached"]
    assert "error" in by_sample[1]["builds"][0]["error"].lower()
    assert (tmp_path / "cache" / "entries").is_dir() and any((tmp_path / "cache" / "entries").iterdir())
    text = (out / "builds.md").read_text()
    assert "4 candidates: 1 build, 1 fail to build (0 of them catch the failure and fall back), 1 call no " \
           "extension builder" in text
    assert by_sample[1]["falls_back"] is False and by_sample[1]["builds"][0]["error"].startswith("main.cpp:")

    # A rerun reports from the log and builds nothing again.
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and (out / "builds.jsonl").read_text().count("\n") == 4


def test_a_candidate_that_catches_its_builds_failure_is_said_to_fall_back():
    sys.path.insert(0, str(SCRIPT.parent))
    from published_builds import falls_back

    guarded = ("import torch\ntry:\n    ext = torch.utils.cpp_extension.load_inline(name='x', cpp_sources='')\n"
               "except Exception:\n    ext = None\n")
    assert falls_back(guarded)
    assert not falls_back(CPP_RELU)  # built at module level: a failure is the candidate's failure
    assert not falls_back("try:\n    import cupy\nexcept ImportError:\n    pass\n" + CPP_RELU)


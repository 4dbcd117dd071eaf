"""CUDA candidates compile through nvcc inside the sandbox, on a machine without a GPU.

Runs where the CUDA build of torch and nvcc are installed (skipped with the CPU build of torch,
as in CI). Nothing CUDA runs here: the kernel is built, then its launch fails on CPU tensors,
which must be a runtime error, not a compile error.
"""

import pytest

from conftest import REPO
from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import evaluate

CUDA_CANDIDATE = REPO / "tests" / "adversarial" / "honest" / "relu_cuda_extension.py"


@pytest.mark.cuda_build
@pytest.mark.slow
def test_cuda_extension_compiles_with_nvcc_in_the_sandbox(example, fast_options):
    result = evaluate(load_problem(example("1_ReLU")), CUDA_CANDIDATE.read_text(),
                      fast_options(timeout=900, correctness_trials=1))
    assert result.status == "runtime_error", result.message
    assert "expected a CUDA tensor" in result.message  # the built kernel's own check ran
    assert result.compile_log == ""
    assert "cuda_extension" in result.optimization_kinds
    # Built by the host's builder: nvcc's chains side by side, the lean torch header (the
    # kernel's source uses nothing else), then served from the cache.
    assert [(b.ok, b.cached, b.lean, b.mode) for b in result.builds] == [(True, False, True, "fast")]


@pytest.mark.cuda_build
@pytest.mark.slow
def test_exact_mode_builds_the_unchanged_source_and_the_cache_serves_it(example, fast_options, tmp_path):
    options = fast_options(timeout=900, correctness_trials=1, build_mode="exact",
                           build_cache=str(tmp_path / "cache"))
    problem = load_problem(example("1_ReLU"))
    first = evaluate(problem, CUDA_CANDIDATE.read_text(), options)
    second = evaluate(problem, CUDA_CANDIDATE.read_text(), options)
    for result in (first, second):
        assert result.status == "runtime_error" and "expected a CUDA tensor" in result.message
    assert [(b.cached, b.lean) for b in first.builds + second.builds] == [(False, False), (True, False)]
    assert second.builds[0].wait_seconds < 2.0

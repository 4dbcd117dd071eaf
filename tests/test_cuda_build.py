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

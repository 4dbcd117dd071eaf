"""CUDA candidates compile through nvcc inside the sandbox, on a machine without a GPU.

Runs where the CUDA build of torch and nvcc are installed (skipped with the CPU build of torch,
as in CI). Nothing CUDA runs here: the kernel is built, then its launch fails on CPU tensors,
which must be a runtime error, not a compile error. The precompiled host prefix must change
nothing in the built library.
"""

import shutil
import time
from pathlib import Path

import pytest

from conftest import REPO
from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import evaluate, isolation
from kernelopt.sandbox.builds import BuildCache, BuildService, build_key, parse_request, run_builder

NO_SANDBOX = isolation.Backend("none", False, False, False)  # the paths must not differ

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


SCALE_CUDA = r'''
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void scale_kernel(const float* in, float* out, float factor, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * factor;
}

torch::Tensor scale(torch::Tensor x, double factor) {
    TORCH_CHECK(x.is_cuda(), "expected a CUDA tensor");
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), (float)factor, n);
    return out;
}
'''


@pytest.mark.cuda_build
@pytest.mark.slow
def test_the_precompiled_host_prefix_gives_the_same_library_byte_for_byte(tmp_path, monkeypatch):
    """After `warm_cuda`, a fast build compiles its host code against the precompiled prefix;
    the library equals the one built without it (both built in the same directory, so the
    source paths compiled into them agree)."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.setenv("CUDA_HOME", isolation.detect_cuda_home())
    request = parse_request({"builder": "load_inline", "name": "scale_ext", "functions": ["scale"],
                             "cpp_sources": ["torch::Tensor scale(torch::Tensor x, double factor);"],
                             "cuda_sources": [SCALE_CUDA], "extra_cuda_cflags": ["-O3"]})
    cache = BuildCache(tmp_path / "cache")
    BuildService(cache, isolation.select_backend("auto")).warm_cuda(["-O3"])
    libraries, logs = [], []
    for pch_root in (None, cache.pch_root):
        build_dir = tmp_path / "scratch" / "build"
        shutil.rmtree(build_dir.parent, ignore_errors=True)
        build_dir.mkdir(parents=True)
        result = run_builder(request, build_dir, "fast", build_key(request, "fast", "9.0"), "9.0",
                             NO_SANDBOX, time.monotonic() + 900, pch_root=pch_root)
        assert result["ok"] and result["lean"], result.get("error")
        libraries.append(Path(result["so"]).read_bytes())
        logs.append(result["log"])
    assert "uses the precompiled host prefix" not in logs[0]
    assert "uses the precompiled host prefix" in logs[1], logs[1][-3000:]
    assert libraries[0] == libraries[1]

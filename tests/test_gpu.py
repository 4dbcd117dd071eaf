"""Behaviour that needs a CUDA device (skipped elsewhere; run on the GPU machine)."""

import statistics

import pytest

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, evaluate

pytestmark = pytest.mark.gpu

CLAMP = '''
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
'''

DEVICE_ASSERT = '''
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        bad = torch.tensor([10**9], device=x.device)
        return torch.relu(x) + x.reshape(-1)[bad].sum() * 0   # out-of-bounds gather on the GPU
'''


def options(**overrides):
    settings = dict(device="cuda", timing_budget=3.0, timeout=300)
    settings.update(overrides)
    return EvalOptions(**settings)


def test_a_cuda_run_reports_the_gpu_and_the_cuda_timing_method(example):
    result = evaluate(load_problem(example("1_ReLU")), CLAMP, options())
    assert result.status == "correct", result.message
    assert result.environment.device.startswith("cuda") and result.environment.device_name
    # The host's clock around each window decides (a CUDA event is the candidate's to forge).
    assert result.environment.cuda and "the host's wall clock" in result.timing.method
    assert "device-wide synchronize" in result.timing.method


@pytest.mark.gpu_timing
def test_same_kernel_measures_stably_across_evaluations(example):
    problem = load_problem(example("4_RedundantSoftmax"))
    source = problem.source.replace("class Model(", "class ModelNew(")
    speedups = [evaluate(problem, source, options()).speedup for _ in range(5)]
    assert all(s is not None for s in speedups)
    assert all(0.8 <= s <= 1.25 for s in speedups), speedups
    assert (max(speedups) - min(speedups)) / statistics.median(speedups) < 0.2, speedups


def test_a_cuda_error_is_a_runtime_error_and_retires_the_worker(example):
    result = evaluate(load_problem(example("1_ReLU")), DEVICE_ASSERT, options())
    assert result.status == "runtime_error"
    assert "retired" in result.message or "CUDA" in result.message


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "exact", "stock"])
def test_every_build_mode_yields_a_correct_cuda_kernel(example, mode, tmp_path):
    """The host builder's libraries behave as stock builds: the same real CUDA kernel passes
    in every mode (fast: lean header and split nvcc; exact: split nvcc; stock: ninja)."""
    from conftest import REPO

    source = (REPO / "tests" / "adversarial" / "honest" / "relu_cuda_extension.py").read_text()
    result = evaluate(load_problem(example("1_ReLU")), source,
                      options(timeout=900, build_mode=mode, build_cache=str(tmp_path / "cache")))
    assert result.status == "correct", result.message
    assert [(b.mode, b.cached) for b in result.builds] == [(mode, False)]
    assert result.builds[0].lean == (mode == "fast")


@pytest.mark.gpu
def test_the_gpu_is_described_for_the_prompt_from_its_properties():
    import torch

    from kernelopt.sandbox.hardware import describe

    hardware = describe("cuda:0")
    name = torch.cuda.get_device_name(0)
    assert name in hardware.summary
    major, minor = torch.cuda.get_device_capability(0)
    assert f"compute capability {major}.{minor}" in hardware.facts[0] and "SMs" in hardware.facts[0]
    assert any(line.startswith("CUDA ") for line in hardware.facts)

"""Training problems (kernelbench/training.py, sandbox/passes.py): the PASS declaration, the
training step derived from a problem, the combined verdict, and the real Evaluator judging
outputs and gradients."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernelopt.kernelbench import ProblemError, load_problem, problem_from_source
from kernelopt.kernelbench.training import candidate_source, effective_pass
from kernelopt.sandbox.passes import combine
from kernelopt.sandbox.results import EvalOptions, EvalResult

REPO = Path(__file__).resolve().parents[1]
TRAINING = REPO / "examples" / "training"
CORPUS = REPO / "tests" / "adversarial"
LINEAR_RELU = CORPUS / "problems" / "TrainLinearReLU.py"
OPTIONS = EvalOptions(device="cpu", timing_budget=1.5, correctness_trials=2, element_checks=1)


def _exec(source: str) -> dict:
    namespace: dict = {"__name__": "problem"}
    exec(compile(source, "problem", "exec"), namespace)
    return namespace


def test_the_pass_is_read_from_the_file_and_the_option_overrides_it():
    assert load_problem(TRAINING / "1_RMSNorm.py").training_pass == "both"
    assert load_problem(LINEAR_RELU).training_pass == "backward"
    assert load_problem(REPO / "examples" / "level1" / "1_ReLU.py").training_pass == "forward"
    assert effective_pass("auto", "both") == "both" and effective_pass("forward", "both") == "forward"
    source = (REPO / "examples" / "level1" / "1_ReLU.py").read_text()
    for bad, says in (('PASS = "sideways"', "say one of"), ("PASS = BACKWARD", "literal string")):
        with pytest.raises(ProblemError, match=says):
            problem_from_source(source + bad + "\n", "1_R.py")


def test_the_training_step_returns_outputs_then_input_then_parameter_gradients():
    """The derived problem, run here as the reference worker would: its last input is the
    upstream gradient, sized by the outputs; its outputs are the model's and autograd's."""
    problem = load_problem(LINEAR_RELU)
    step = problem.for_training()
    assert step.training_pass == "forward" and step.shapes == ()  # a plain problem of its own
    namespace = _exec(step.source)
    torch.manual_seed(1)
    inputs = namespace["get_inputs"]()
    x, upstream = inputs
    assert x.shape == (64, 256) and upstream.shape == (64 * 256,)
    torch.manual_seed(42)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    out, grad_x, grad_w, grad_b = model(*inputs)
    torch.manual_seed(42)
    plain = _exec(problem.source)["Model"](256)
    leaf = x.clone().requires_grad_(True)
    expected = plain(leaf)
    expected.backward(upstream.view_as(expected))
    torch.testing.assert_close(out, expected.detach())
    torch.testing.assert_close(grad_x, leaf.grad)
    torch.testing.assert_close(grad_w, plain.linear.weight.grad)
    torch.testing.assert_close(grad_b, plain.linear.bias.grad)
    assert not out.requires_grad and model.model.linear.weight.grad is None  # nothing left for the next call


def test_a_candidate_is_wrapped_in_the_same_step():
    wrapped = _exec(candidate_source((CORPUS / "honest" / "train_linear_relu_exact_copy.py").read_text()))
    model = wrapped["ModelNew"](8)
    outputs = model(torch.randn(2, 8), torch.randn(16))
    assert [tuple(o.shape) for o in outputs] == [(2, 8), (2, 8), (8, 8), (8,)]


def test_a_problem_without_a_differentiable_output_says_to_judge_the_forward():
    argmax = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.argmax(-1)\n"
              "def get_inputs():\n    return [torch.randn(4, 8)]\ndef get_init_inputs():\n    return []\n")
    namespace = _exec(problem_from_source(argmax, "1_Argmax.py").for_training().source)
    inputs = namespace["get_inputs"]()
    with pytest.raises(RuntimeError, match="--pass forward"):
        namespace["Model"](*namespace["get_init_inputs"]())(*inputs)


def _correct(reference_ms: float, candidate_ms: float) -> EvalResult:
    return EvalResult(status="correct", correct=True, speedup=reference_ms / candidate_ms,
                      reference_ms=reference_ms, candidate_ms=candidate_ms, message="matched")


def test_both_passes_give_forward_backward_and_step_speedups():
    verdict = combine([("forward", _correct(2.0, 1.0)), ("step", _correct(6.0, 5.0))])
    assert verdict.speedup == pytest.approx(1.2)  # the step's: what a training run pays
    assert verdict.passes.forward.speedup == pytest.approx(2.0)
    assert verdict.passes.backward.speedup == pytest.approx(4.0 / 4.0)  # (6-2) / (5-1)
    assert verdict.passes.backward.speedup_precision is None
    assert "forward 2.000x, backward 1.000x, training step 1.200x" in verdict.message


def test_a_failed_pass_decides_and_is_named():
    failed = EvalResult(status="incorrect", correct=False, message="trial 0: output 2: 99% of values outside")
    verdict = combine([("forward", _correct(2.0, 1.0)), ("step", failed)])
    assert verdict.status == "incorrect" and verdict.passes is None
    assert verdict.message.startswith("in the training step (forward and backward, outputs and gradients): trial 0")
    assert "then those of the parameters" in verdict.message


# -- the real Evaluator ----------------------------------------------------------------------------

def test_an_exact_copy_of_a_bundled_training_problem_is_correct_in_both_passes():
    from kernelopt.sandbox import evaluate

    problem = load_problem(TRAINING / "1_RMSNorm.py")
    verdict = evaluate(problem, problem.source.replace("class Model(", "class ModelNew("), OPTIONS)
    assert verdict.correct, verdict.message
    assert verdict.passes.forward.speedup > 0 and verdict.passes.step.speedup == pytest.approx(verdict.speedup)
    assert [c.detail for c in verdict.checks if c.name == "passes"] == ["forward: correct, step: correct"]


def test_the_pass_option_judges_a_plain_problem_s_training_step_or_a_training_problem_s_forward():
    from kernelopt.sandbox import evaluate

    relu = load_problem(REPO / "examples" / "level1" / "1_ReLU.py")
    copy = relu.source.replace("class Model(", "class ModelNew(")
    step = evaluate(relu, copy, OPTIONS.model_copy(update={"training_pass": "backward"}))
    assert step.correct and step.passes is not None and step.passes.forward is None
    rms = load_problem(TRAINING / "1_RMSNorm.py")
    forward = evaluate(rms, rms.source.replace("class Model(", "class ModelNew("),
                       OPTIONS.model_copy(update={"training_pass": "forward"}))
    assert forward.correct and forward.passes is None


def test_a_custom_backward_that_ignores_the_upstream_gradient_is_incorrect():
    from kernelopt.sandbox import evaluate

    verdict = evaluate(load_problem(LINEAR_RELU), (CORPUS / "hacks" / "backward_ignores_upstream_gradient.py").read_text(),
                       OPTIONS)
    assert verdict.status == "incorrect" and verdict.message.startswith("in the training step")


def test_eval_json_carries_the_passes(tmp_path):
    import subprocess
    import sys

    candidate = TRAINING / "candidates" / "1_RMSNorm" / "fused_backward.py"
    done = subprocess.run([sys.executable, "-m", "kernelopt", "eval", "--reference", str(TRAINING / "1_RMSNorm.py"),
                           "--candidate", str(candidate), "--device", "cpu", "--timing-budget", "1.5",
                           "--correctness-trials", "2", "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["status"] == "correct"
    assert set(verdict["passes"]) == {"forward", "backward", "step"}


def test_optimize_with_pass_both_runs_end_to_end_through_the_loopback_llm(monkeypatch, capsys, tmp_path):
    import sqlite3

    from llm_server import ScriptedLLMServer

    from kernelopt.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    problem = LINEAR_RELU.read_text().replace('PASS = "backward"', 'PASS = "forward"')
    (tmp_path / "1_TrainLinearReLU.py").write_text(problem)
    answers = [(CORPUS / "hacks" / "backward_ignores_upstream_gradient.py").read_text(),
               (CORPUS / "honest" / "train_linear_relu_custom_backward.py").read_text()]
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer([f"```python\n{code}```" for code in answers]) as server:
        code = main(["optimize", str(tmp_path / "1_TrainLinearReLU.py"), "--pass", "both", "--model", "test-model",
                     "--base-url", server.url, "--store", str(store), "--budget", "2", "--strategy", "refine",
                     "--device", "cpu", "--timing-budget", "1.5", "--correctness-trials", "2"])
        prompts = server.user_texts()
        systems = [m["content"] for body in server.requests for m in body["messages"] if m["role"] == "system"]
    assert code == 0, capsys.readouterr().err
    assert all("judged as a training step (and its forward pass alone)" in s for s in systems)
    assert "in the training step" in prompts[1]  # the first answer's feedback
    verdicts = [json.loads(r[0]) for r in sqlite3.connect(store).execute("SELECT result FROM evaluations ORDER BY id")]
    assert verdicts[0]["status"] == "incorrect"
    assert verdicts[1]["status"] == "correct" and set(verdicts[1]["passes"]) == {"forward", "backward", "step"}


def test_a_training_problem_with_several_configurations_is_judged_in_each_pass_of_each(tmp_path):
    from kernelopt.sandbox import evaluate

    source = LINEAR_RELU.read_text().replace('PASS = "backward"', 'PASS = "both"') + \
        'SHAPES = [{}, {"batch_size": 7}]\n'
    problem = problem_from_source(source, str(tmp_path / "1_ShapedTrain.py"))
    verdict = evaluate(problem, source.replace("class Model(", "class ModelNew("), OPTIONS)
    assert verdict.correct, verdict.message
    assert [s.name for s in verdict.shapes] == ["default", "batch_size=7"]
    # Each pass's speedup over the configurations is their geometric mean, the step's the verdict's.
    assert verdict.passes is not None and verdict.passes.step.speedup == pytest.approx(verdict.speedup)
    assert verdict.passes.forward is not None


CUDA_RELU_BACKWARD = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = """
#include <torch/extension.h>
__global__ void relu_backward_kernel(const float* g, const float* y, float* out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = y[i] > 0.f ? g[i] : 0.f;
}
torch::Tensor relu_backward(torch::Tensor g, torch::Tensor y) {
    auto gc = g.contiguous();
    auto out = torch::empty_like(gc);
    long n = gc.numel();
    relu_backward_kernel<<<(n + 255) / 256, 256>>>(gc.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
_ext = load_inline("train_relu_backward", cpp_sources="torch::Tensor relu_backward(torch::Tensor g, torch::Tensor y);",
                   cuda_sources=_SOURCE, functions=["relu_backward"])


class _ReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.clamp_min(0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return _ext.relu_backward(g, y)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return _ReLU.apply(self.linear(x))
'''


@pytest.mark.gpu
def test_a_cuda_custom_backward_is_judged_on_the_gpu():
    """A ReLU whose backward is a CUDA kernel (load_inline), on the GPU: outputs and every
    gradient correct; the exact copy and the bundled RMS norm's closed-form backward too."""
    from kernelopt.sandbox import evaluate

    options = EvalOptions(device="cuda", timing_budget=3.0, timeout=600, correctness_trials=3)
    verdict = evaluate(load_problem(LINEAR_RELU), CUDA_RELU_BACKWARD, options)
    assert verdict.correct, verdict.message
    assert verdict.passes is not None and verdict.environment.device.startswith("cuda")
    rms = load_problem(TRAINING / "1_RMSNorm.py")
    fused = evaluate(rms, (TRAINING / "candidates" / "1_RMSNorm" / "fused_backward.py").read_text(), options)
    assert fused.correct and fused.passes.backward is not None, fused.message

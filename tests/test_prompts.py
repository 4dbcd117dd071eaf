"""Prompt templates, the referee's feedback as text, and what the templates see of an Attempt."""

from __future__ import annotations

import os

import jinja2
import pytest

from kernelopt.agent.attempt import Attempt
from kernelopt.agent.prompting import (
    HISTORY_ERROR_CHARS,
    LOG_LINES,
    PromptContext,
    backend_for,
    feedback_text,
    format_error_feedback,
    short_error,
)
from kernelopt.sandbox.results import EvalResult, Timing, TimingStats, TrialResult

REFERENCE = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 3.5  # UNIQUE-REFERENCE-MARKER


def get_inputs():
    return [torch.randn(1024)]


def get_init_inputs():
    return []
"""

DEVICES = {"cuda": "an NVIDIA GPU (H100)", "cpp": "the CPU"}


def context(backend: str) -> PromptContext:
    return PromptContext(reference_source="\n\n" + REFERENCE + "\n\n", problem_name="19_ReLU_Scale",
                         backend=backend, device_desc=DEVICES[backend])


def correct(index: int, speedup: float, code: str | None = None, parent: Attempt | None = None) -> Attempt:
    result = EvalResult(status="correct", correct=True, speedup=speedup, reference_ms=1.0,
                        candidate_ms=1.0 / speedup)
    return Attempt(index=index, parent=parent, code=code or f"# code of attempt {index}", result=result)


def compile_failure(index: int, log: str = "kernel.cu(12): error: identifier \"blockIdx\" is undefined") -> Attempt:
    result = EvalResult(status="compile_error", correct=False, message="the extension did not build",
                        compile_log=log)
    return Attempt(index=index, code=f"# broken code of attempt {index}", result=result)


def format_failure(index: int) -> Attempt:
    return Attempt(index=index, format_error="the answer holds no ```python block")


def template_values(template: str) -> dict:
    last = compile_failure(2)
    if template == "first_attempt.j2":
        return {}
    if template == "refine.j2":
        return {"last": last.view(), "best": None, "diagnosis": None, "history": []}
    if template == "contrastive.j2":
        return {"parent": correct(1, 1.3).view(), "diagnosis": None,
                "exemplars": [format_failure(3).view(), correct(4, 0.7).view()]}
    if template == "critique.j2":
        return {"last": last.view()}
    raise AssertionError(template)


TEMPLATES = ("first_attempt.j2", "refine.j2", "contrastive.j2", "critique.j2")


# every template, both backends ----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cuda", "cpp"])
@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_renders_for_both_backends(template, backend):
    ctx = context(backend)
    messages = ctx.messages(template, **template_values(template))
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]

    if backend == "cuda":
        assert "CUDA kernels for NVIDIA GPUs" in system
        assert "C++ code for CPUs" not in system
    else:
        assert "fast C++ code for CPUs" in system
        assert "CUDA" not in system
    assert DEVICES[backend] in system
    assert "ModelNew" in system

    # the reference source, stripped, and the problem name
    assert REFERENCE.strip() in user
    assert "```python\n" + REFERENCE.strip() + "\n```" in user
    assert "19_ReLU_Scale" in user
    assert user.endswith("\n") and not user.endswith("\n\n")
    assert not user.startswith("\n")
    assert ctx.render(template, **template_values(template)) == user


@pytest.mark.parametrize("backend", ["cuda", "cpp"])
def test_first_attempt_shows_the_example_of_its_backend(backend):
    user = context(backend).render("first_attempt.j2")
    assert "load_inline(" in user
    assert "class ModelNew(nn.Module)" in user
    if backend == "cuda":
        assert "cuda_sources=cuda_source" in user
        assert "__global__ void mul_add_kernel" in user
        assert "at::parallel_for" not in user
    else:
        assert "cpp_sources=cpp_source" in user
        assert "cuda_sources" not in user
        assert "__global__" not in user
        assert "at::parallel_for" in user
    assert f"faster on {DEVICES[backend]}" in user
    # the example comes before the problem
    assert user.index("mul_add") < user.index("UNIQUE-REFERENCE-MARKER")


def test_only_the_first_prompt_carries_the_example():
    for template in ("refine.j2", "contrastive.j2", "critique.j2"):
        assert "mul_add" not in context("cuda").render(template, **template_values(template))


def test_missing_template_values_are_errors():
    ctx = context("cuda")
    with pytest.raises(jinja2.UndefinedError):
        ctx.render("refine.j2", best=None, diagnosis=None, history=[])
    with pytest.raises(jinja2.UndefinedError):
        ctx.render("refine.j2", last=compile_failure(1).view(), best=None, diagnosis=None)
    with pytest.raises(jinja2.UndefinedError):
        ctx.render("contrastive.j2", parent=correct(1, 1.0).view(), diagnosis=None)
    with pytest.raises(jinja2.UndefinedError):
        ctx.render("critique.j2")
    with pytest.raises(jinja2.UndefinedError):
        ctx.messages("critique.j2")


def test_backend_helper():
    assert backend_for("cuda") == "cuda"
    assert backend_for("cuda:1") == "cuda"
    assert backend_for("cpu") == "cpp"


def test_the_system_prompt_names_the_hardware_the_code_is_timed_on():
    from kernelopt.sandbox.hardware import describe

    cpu = describe("cpu")
    ctx = PromptContext(reference_source="class Model: pass", problem_name="p", backend="cpp",
                        device_desc=cpu.summary, hardware=cpu.facts)
    system = ctx.messages("first_attempt.j2")[0]["content"]
    assert "The hardware your code is timed on:" in system
    assert "ONE CPU thread" in system and f"the machine has {os.cpu_count()} cores" in system
    with open("/proc/cpuinfo") as handle:
        model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), None)
    if model:
        assert model in system and cpu.summary == f"the CPU ({model})"
    bare = PromptContext(reference_source="class Model: pass", problem_name="p", backend="cpp", device_desc="the CPU")
    assert "hardware your code is timed on" not in bare.messages("first_attempt.j2")[0]["content"]


def test_gpu_peak_figures_come_from_the_datasheet_table_by_name():
    from kernelopt.sandbox.hardware import peak_figures

    assert peak_figures("NVIDIA H100 80GB HBM3")["bandwidth_tbs"] == 3.35
    assert peak_figures("NVIDIA H100 PCIe")["bandwidth_tbs"] == 2.0
    assert peak_figures("NVIDIA H200")["bandwidth_tbs"] == 4.8
    assert peak_figures("NVIDIA A100-SXM4-80GB")["bf16"] == 312
    assert peak_figures("NVIDIA GeForce GTX 1080") is None  # unknown: no guess


# refine.j2 ------------------------------------------------------------------------------------------


def test_refine_shows_history_with_errors():
    ctx = context("cuda")
    history = [compile_failure(1, log="nvcc: fatal error: UNIQUE-LOG-LINE"), format_failure(2), correct(3, 1.4)]
    user = ctx.render("refine.j2", last=compile_failure(4).view(), best=None, diagnosis=None,
                      history=[a.view() for a in history])
    assert "Earlier attempts, oldest first:" in user
    assert "- attempt 1: compile error" in user
    assert "error: " in user and "UNIQUE-LOG-LINE" in user
    assert "- attempt 2: format error" in user
    assert "the answer holds no ```python block" in user
    assert "- attempt 3: correct, speedup 1.400x" in user
    assert user.index("- attempt 1") < user.index("- attempt 2") < user.index("- attempt 3")
    # a correct entry has no error text: its view says so
    assert history[2].view()["error"] is None
    # the history shows no code
    assert "# broken code of attempt 1" not in user
    assert "# code of attempt 3" not in user


def test_refine_without_history_has_no_history_section():
    user = context("cuda").render("refine.j2", last=compile_failure(1).view(), best=None, diagnosis=None,
                                  history=[])
    assert "Earlier attempts" not in user


def test_refine_history_entries_are_one_per_line():
    history = [compile_failure(1), format_failure(2), correct(3, 1.4)]
    user = context("cuda").render("refine.j2", last=compile_failure(4).view(), best=correct(3, 1.4).view(),
                                  diagnosis=None, history=[a.view() for a in history])
    lines = user.splitlines()
    entries = [line for line in lines if line.startswith("- attempt ")]
    assert len(entries) == 3
    assert entries[0].startswith("- attempt 1: compile error")
    assert entries[1].startswith("- attempt 2: format error")
    assert entries[2] == "- attempt 3: correct, speedup 1.400x (reference 1 ms, candidate 0.7143 ms)"
    assert "The best correct version so far:" in lines
    assert "Your last attempt:" in lines


def test_refine_shows_the_best_version_when_given():
    ctx = context("cuda")
    best = correct(2, 1.8, code="# UNIQUE-BEST-CODE")
    with_best = ctx.render("refine.j2", last=compile_failure(3).view(), best=best.view(), diagnosis=None,
                           history=[])
    assert "The best correct version so far:" in with_best
    assert "# UNIQUE-BEST-CODE" in with_best
    assert "### attempt 2: correct, speedup 1.800x" in with_best
    assert with_best.index("# UNIQUE-BEST-CODE") < with_best.index("Your last attempt:")

    without = ctx.render("refine.j2", last=compile_failure(3).view(), best=None, diagnosis=None, history=[])
    assert "The best correct version so far:" not in without
    assert "UNIQUE-BEST-CODE" not in without


def test_refine_instruction_depends_on_correctness_of_the_last_attempt():
    ctx = context("cpp")
    failed = ctx.render("refine.j2", last=compile_failure(1).view(), best=None, diagnosis=None, history=[])
    assert "Fix what the referee reported" in failed
    assert "Make it faster" not in failed
    assert "# broken code of attempt 1" in failed
    assert 'identifier "blockIdx" is undefined' in failed

    fine = ctx.render("refine.j2", last=correct(1, 1.2).view(), best=None, diagnosis=None, history=[])
    assert "Make it faster on the CPU" in fine
    assert "Fix what the referee reported" not in fine
    assert "# code of attempt 1" in fine


def test_refine_shows_the_diagnosis_when_given():
    ctx = context("cuda")
    user = ctx.render("refine.j2", last=compile_failure(1).view(), best=None,
                      diagnosis="- the kernel reads out of bounds", history=[])
    assert "A reviewer's diagnosis of the last attempt:\n- the kernel reads out of bounds" in user
    assert "reviewer" not in ctx.render("refine.j2", last=compile_failure(1).view(), best=None,
                                        diagnosis=None, history=[])


# contrastive.j2 and critique.j2 --------------------------------------------------------------------


def test_contrastive_lists_exemplars_in_the_given_order():
    ctx = context("cuda")
    exemplars = [format_failure(5), correct(2, 0.8), correct(7, 1.2), correct(3, 2.5)]
    parent = correct(9, 1.9, code="# UNIQUE-PARENT-CODE")
    user = ctx.render("contrastive.j2", parent=parent.view(), diagnosis="DIAGNOSIS-TEXT",
                      exemplars=[e.view() for e in exemplars])
    headings = ["### attempt 5: format error",
                "### attempt 2: correct, speedup 0.800x",
                "### attempt 7: correct, speedup 1.200x",
                "### attempt 3: correct, speedup 2.500x"]
    positions = [user.index(h) for h in headings]
    assert positions == sorted(positions)
    start = user.index("Start from this version:")
    assert positions[-1] < start
    assert user.index("### attempt 9: correct, speedup 1.900x") > start
    assert "# UNIQUE-PARENT-CODE" in user[start:]
    assert "# code of attempt 7" in user
    assert "the answer holds no ```python block" in user
    assert "A reviewer's diagnosis:\nDIAGNOSIS-TEXT" in user

    reversed_user = ctx.render("contrastive.j2", parent=parent.view(), diagnosis=None,
                               exemplars=[e.view() for e in reversed(exemplars)])
    reversed_positions = [reversed_user.index(h) for h in headings]
    assert reversed_positions == sorted(reversed_positions, reverse=True)
    assert "reviewer" not in reversed_user


def test_critique_shows_the_candidate_and_its_feedback():
    user = context("cuda").render("critique.j2", last=compile_failure(4, log="LOG-LINE-XYZ").view())
    assert "### attempt 4: compile error" in user
    assert "# broken code of attempt 4" in user
    assert "Referee's feedback:" in user
    assert "LOG-LINE-XYZ" in user
    assert "Do not write the corrected program" in user


# feedback_text ---------------------------------------------------------------------------------------


def test_feedback_for_a_long_compile_log_shows_its_last_lines():
    log = "\n".join(f"log line {i:03d}" for i in range(100))
    result = EvalResult(status="compile_error", correct=False, message="build failed", compile_log=log)
    text = feedback_text(result)
    lines = text.splitlines()
    assert lines[0] == "verdict: compile_error"
    assert lines[1] == "message: build failed"
    assert f"compile log (last {LOG_LINES} lines):" in lines
    shown = [line for line in lines if line.startswith("log line")]
    assert shown == [f"log line {i:03d}" for i in range(100 - LOG_LINES, 100)]
    assert "log line 059" not in text


def test_feedback_for_a_short_compile_log_shows_all_of_it():
    result = EvalResult(status="compile_error", correct=False, compile_log="first\nsecond\n")
    text = feedback_text(result)
    assert "compile log (last 2 lines):\nfirst\nsecond" in text


def test_feedback_for_an_incorrect_result_shows_trial_statistics():
    trials = [
        TrialResult(index=0, seed=11, passed=True),
        TrialResult(index=1, seed=12, passed=False, message="output 0 differs", max_abs_error=0.5,
                    max_rel_error=0.25, rel_l2_error=0.125, mismatch_fraction=0.03125),
        TrialResult(index=2, seed=13, passed=False, max_abs_error=1.5),
    ]
    result = EvalResult(status="incorrect", correct=False, message="outputs differ", trials=trials,
                        compile_log="built fine", candidate_output="debug print")
    lines = feedback_text(result).splitlines()
    assert lines[0] == "verdict: incorrect"
    assert "message: outputs differ" in lines
    assert ("trial 1: output 0 differs (max abs error 0.5, max rel error 0.25, relative L2 error 0.125, "
            "mismatched fraction 0.0312)") in lines
    assert "trial 2: mismatch (max abs error 1.5)" in lines
    assert not any(line.startswith("trial 0") for line in lines)
    assert "program output (tail):" in lines and "debug print" in lines
    assert not any(line.startswith("timing:") for line in lines)


def test_feedback_names_how_precisely_the_speedup_was_measured():
    side = TimingStats(samples=40, median_ms=1.0, mean_ms=1.0, std_ms=0.1, min_ms=0.8, max_ms=1.3,
                       p25_ms=0.95, p75_ms=1.05, rel_iqr=0.1, median_precision=0.03)
    timing = Timing(method="host perf_counter per call", reference=side, candidate=side, rounds=4,
                    calls_per_round=10, reference_ms=1.25, candidate_ms=0.5, speedup_precision=0.042)
    result = EvalResult(status="correct", correct=True, speedup=2.5, reference_ms=1.25, candidate_ms=0.5,
                        timing=timing)
    assert ("timing: reference 1.25 ms, candidate 0.5 ms, speedup 2.500x +-4% (95% interval: smaller "
            "differences are noise)") in feedback_text(result).splitlines()


def test_feedback_shows_at_most_three_failed_trials():
    trials = [TrialResult(index=i, seed=i, passed=False, max_abs_error=1.0) for i in range(5)]
    text = feedback_text(EvalResult(status="incorrect", correct=False, trials=trials))
    assert [line.split(":")[0] for line in text.splitlines() if line.startswith("trial")] == [
        "trial 0", "trial 1", "trial 2"]


def test_feedback_for_a_correct_result_shows_timing():
    result = EvalResult(status="correct", correct=True, speedup=2.5, reference_ms=1.25, candidate_ms=0.5,
                        compile_log="lots of compiler chatter", candidate_output="noise",
                        optimization_kinds=["custom_kernel", "fusion"], flags=["reduced_precision"])
    text = feedback_text(result)
    lines = text.splitlines()
    assert lines[0] == "verdict: correct"
    assert "timing: reference 1.25 ms, candidate 0.5 ms, speedup 2.500x" in lines
    assert "optimization kind: custom_kernel, fusion" in lines
    assert "flags: reduced_precision" in lines
    # the log and the output of a correct candidate are not shown
    assert "compiler chatter" not in text
    assert "noise" not in text


def test_format_error_feedback():
    assert format_error_feedback("no code") == "verdict: format_error\nmessage: no code"


def test_short_error_keeps_a_short_error_whole():
    assert short_error("the kernel crashed") == "the kernel crashed"
    assert short_error("") == ""


def test_short_error_truncates():
    long = "build failed\n" + "\n".join(f"kernel.cu:{i}: error: " + "y" * 280 for i in range(4))
    text = short_error(long)
    assert HISTORY_ERROR_CHARS == 600
    assert len(text) == HISTORY_ERROR_CHARS + len(" ...")
    assert text.endswith(" ...")
    assert text.startswith("build failed")
    assert "kernel.cu:0: error: yyy" in text


# Attempt as the templates see it ---------------------------------------------------------------------


def test_attempt_with_a_format_error():
    a = format_failure(3)
    assert a.status == "format_error"
    assert a.headline == "format error"
    assert a.score == 0.0
    assert not a.correct
    assert a.feedback == "verdict: format_error\nmessage: the answer holds no ```python block"
    view = a.view()
    assert {k: v for k, v in view.items() if k != "error"} == {
        "label": "attempt 3", "headline": "format error", "code": None, "feedback": a.feedback,
        "correct": False, "score": 0.0, "profile": None}
    assert "the answer holds no ```python block" in view["error"]
    assert not view["error"].startswith("verdict:")


def test_attempt_with_an_llm_error():
    a = Attempt(index=2, llm_error="gave up after 6 attempts: 503: overloaded")
    assert a.status == "llm_error"
    assert a.headline == "llm error"
    assert a.score == 0.0
    assert a.feedback == "verdict: not evaluated\nmessage: gave up after 6 attempts: 503: overloaded"
    view = a.view()
    assert view["label"] == "attempt 2"
    assert "gave up after 6 attempts: 503: overloaded" in view["error"]
    assert view["correct"] is False and view["code"] is None


def test_attempt_not_evaluated():
    a = Attempt(index=1, code="x", eval_error="not evaluated: sandbox broke")
    assert a.status == "not_evaluated"
    assert a.headline == "not evaluated"
    assert "sandbox broke" in a.feedback
    assert a.score == 0.0


def test_attempt_with_a_correct_result():
    a = correct(4, 2.0, code="# fast")
    assert a.status == "correct"
    assert a.correct
    assert a.score == 2.0
    assert a.headline == "correct, speedup 2.000x (reference 1 ms, candidate 0.5 ms)"
    view = a.view()
    assert view["error"] is None
    assert view["code"] == "# fast"
    assert view["score"] == 2.0
    assert view["feedback"] == feedback_text(a.result)


def test_attempt_with_a_failed_result():
    a = compile_failure(5)
    assert a.status == "compile_error"
    assert a.headline == "compile error"
    assert a.score == 0.0
    assert not a.correct
    view = a.view()
    assert "the extension did not build" in view["error"]
    assert 'identifier "blockIdx" is undefined' in view["error"]
    assert not view["error"].startswith("verdict:")

    runtime = Attempt(index=6, code="c", result=EvalResult(status="runtime_error", correct=False,
                                                           speedup=3.0))
    assert runtime.headline == "runtime error"
    assert runtime.score == 0.0  # a speedup of an incorrect candidate is worth nothing

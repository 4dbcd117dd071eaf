"""Problems with several input configurations (kernelbench/shapes.py, sandbox/shaped.py): the
declaration, each configuration's problem, the combined verdict, what a prompt may show, and
the real Evaluator judging every configuration."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kernelopt.kernelbench import ProblemError, load_problem, problem_from_source
from kernelopt.kernelbench.shapes import Shape, ShapeError, select
from kernelopt.sandbox.results import EvalOptions, EvalResult, Timing, TimingStats
from kernelopt.sandbox.shaped import combine, prompt_view

REPO = Path(__file__).resolve().parents[1]
SHAPED_SOFTMAX = REPO / "tests" / "adversarial" / "problems" / "ShapedSoftmax.py"
CORPUS = REPO / "tests" / "adversarial"

PLAIN = """import torch
batch_size = 16
dim = 64
half = dim // 2
class Model(torch.nn.Module):
    def forward(self, x):
        return x.relu()
def get_inputs():
    return [torch.randn(batch_size, dim)]
def get_init_inputs():
    return []
"""
DECLARED = PLAIN + 'SHAPES = [\n    {},\n    {"batch_size": 3, "dim": 10},\n]\nHELD_OUT_SHAPES = [{"dim": 7}]\n'


def test_a_plain_kernelbench_file_is_one_configuration():
    assert problem_from_source(PLAIN, "1_R.py").shapes == ()


def test_declared_configurations_shown_first_then_held_out():
    problem = problem_from_source(DECLARED, "1_R.py")
    assert [s.name for s in problem.shapes] == ["default", "batch_size=3 dim=10", "dim=7"]
    assert [s.held_out for s in problem.shapes] == [False, False, True]


def test_a_configuration_replaces_its_constants_and_what_is_computed_from_them_follows():
    problem = problem_from_source(DECLARED, "1_R.py")
    narrow = problem.for_shape(problem.shapes[1])
    namespace: dict = {}
    exec(compile(narrow.source, "narrow", "exec"), namespace)
    assert (namespace["batch_size"], namespace["dim"], namespace["half"]) == (3, 10, 5)
    assert tuple(namespace["get_inputs"]()[0].shape) == (3, 10)
    assert "SHAPES" not in narrow.source and narrow.shapes == ()  # a plain problem of its own
    assert narrow.content_hash != problem.content_hash and narrow.name == problem.name


def test_prompts_see_the_file_without_its_held_out_configurations():
    shown = problem_from_source(DECLARED, "1_R.py").shown_source
    assert "HELD_OUT_SHAPES" not in shown and '"dim": 7' not in shown
    assert 'SHAPES = [\n    {},' in shown  # the shown ones stay, as written
    assert problem_from_source(PLAIN, "1_R.py").shown_source == PLAIN


@pytest.mark.parametrize("declaration, says", [
    ('SHAPES = [{"batch": 3}]', "'batch', which the file does not assign"),
    ('SHAPES = [{"dim": dim * 2}]', "literal list"),
    ("SHAPES = []", "non-empty"),
    ('SHAPES = [3]', "not a dict"),
    ('HELD_OUT_SHAPES = [{"dim": 3}]', "needs SHAPES"),
    ('SHAPES = [{"dim": 3}, {"dim": 3}]', "declared twice"),
])
def test_an_unusable_declaration_is_a_problem_error_that_says_what_to_change(declaration, says):
    with pytest.raises(ProblemError) as caught:
        problem_from_source(PLAIN + declaration + "\n", "1_R.py")
    assert says in str(caught.value)


def test_a_rewritten_constant_needs_its_own_line():
    source = PLAIN.replace("dim = 64\n", "dim = 64; other = 1\n") + 'SHAPES = [{"dim": 3}]\n'
    with pytest.raises(ProblemError, match="line of its own"):
        problem_from_source(source, "1_R.py")


def test_shapes_selects_by_group_or_position():
    shapes = list(problem_from_source(DECLARED, "1_R.py").shapes)
    assert select(shapes, "all") == shapes
    assert [s.name for s in select(shapes, "shown")] == ["default", "batch_size=3 dim=10"]
    assert [s.name for s in select(shapes, "held-out")] == ["dim=7"]
    assert [s.name for s in select(shapes, "3,1")] == ["dim=7", "default"]
    for bad in ("4", "0", "first", ""):
        with pytest.raises(ShapeError):
            select(shapes, bad)


# -- combining verdicts -------------------------------------------------------------------------

def _stats(ms: float) -> TimingStats:
    return TimingStats(samples=10, median_ms=ms, mean_ms=ms, std_ms=0.0, min_ms=ms, max_ms=ms, p25_ms=ms,
                       p75_ms=ms, rel_iqr=0.0)


def _correct(reference_ms: float, candidate_ms: float, precision: float) -> EvalResult:
    timing = Timing(method="host", reference=_stats(reference_ms), candidate=_stats(candidate_ms), rounds=3,
                    calls_per_round=4, reference_ms=reference_ms, candidate_ms=candidate_ms,
                    speedup_precision=precision)
    return EvalResult(status="correct", correct=True, speedup=timing.speedup, reference_ms=reference_ms,
                      candidate_ms=candidate_ms, timing=timing, message="all trials matched")


SMALL, LARGE, HELD = Shape((("dim", 8),)), Shape((("dim", 4096),)), Shape((("dim", 33),), held_out=True)


def test_all_correct_gives_the_geometric_mean_as_the_ratio_of_geometric_mean_times():
    verdict = combine([(SMALL, _correct(1.0, 0.5, 0.1)), (LARGE, _correct(8.0, 16.0, 0.1))], 2)
    assert verdict.correct and verdict.speedup == pytest.approx(math.sqrt(2.0 * 0.5))
    assert verdict.timing.speedup == pytest.approx(verdict.speedup)
    # Independent configurations: log half-widths in quadrature over n.
    assert verdict.timing.speedup_precision == pytest.approx(math.expm1(math.sqrt(2) * math.log1p(0.1) / 2))
    assert [(s.name, s.speedup) for s in verdict.shapes] == [("dim=8", 2.0), ("dim=4096", 0.5)]
    assert "geometric-mean speedup 1.000x" in verdict.message


def test_the_first_failure_decides_and_is_named():
    failed = EvalResult(status="incorrect", correct=False, message="trial 1: max abs error 0.5", flags=["inconsistent_outputs"])
    verdict = combine([(SMALL, _correct(1.0, 0.5, 0.1)), (HELD, failed)], 3)
    assert verdict.status == "incorrect" and verdict.speedup is None
    assert verdict.message.startswith("on configuration [dim=33] (held out): trial 1")
    assert [s.status for s in verdict.shapes] == ["correct", "incorrect"]
    assert "1 not judged" in verdict.checks[-1].detail and verdict.flags == ["inconsistent_outputs"]


def test_a_prompt_sees_nothing_of_a_held_out_configuration():
    from kernelopt.agent.prompting import feedback_text
    from kernelopt.rewards.environments.feedback import verdict_text

    failed = EvalResult(status="incorrect", correct=False, message="output (33,) differs at dim=33",
                        candidate_output="printed 33", compile_log="dim=33")
    verdict = combine([(SMALL, _correct(1.0, 0.5, 0.1)), (HELD, failed)], 2)
    for text in (feedback_text(verdict), prompt_view(verdict).message,
                 verdict_text(verdict.model_dump(mode="json"))):
        assert "33" not in text and "held-out" in text
    passed = combine([(SMALL, _correct(1.0, 0.5, 0.1)), (HELD, _correct(1.0, 1.0, 0.1))], 2)
    assert "dim=33" in passed.message  # the stored verdict names it, for the user
    assert "dim=33" not in feedback_text(passed) and "1 held out" in feedback_text(passed)


# -- the real Evaluator -----------------------------------------------------------------------------

OPTIONS = EvalOptions(device="cpu", timing_budget=1.5, correctness_trials=2, element_checks=1)


def _candidate(relative: str) -> str:
    return (CORPUS / relative).read_text()


def test_an_exact_copy_is_correct_on_every_configuration_held_out_included():
    from kernelopt.sandbox.batch import Evaluator

    problem = load_problem(SHAPED_SOFTMAX)
    copy = problem.source.replace("class Model(", "class ModelNew(")
    with Evaluator(problem, OPTIONS, keep_spare=False) as evaluator:
        verdict = evaluator.evaluate(copy)
        shown = Evaluator(problem, OPTIONS.model_copy(update={"shapes": "shown"}), keep_spare=False)
        with shown:
            shown_only = shown.evaluate(copy)
    assert verdict.correct, verdict.message
    assert [(s.name, s.held_out, s.status) for s in verdict.shapes] == [
        ("default", False, "correct"), ("batch_size=16 dim=4096", False, "correct"),
        ("batch_size=37 dim=1500", True, "correct")]
    speedups = [s.speedup for s in verdict.shapes]
    assert verdict.speedup == pytest.approx(math.prod(speedups) ** (1 / 3))
    assert all(0.25 < s < 4.0 for s in speedups)  # an exact copy, on a host the suite loads; the bench holds 0.8-1.25
    assert [s.name for s in shown_only.shapes] == ["default", "batch_size=16 dim=4096"]


def test_a_kernel_tuned_to_the_shown_sizes_fails_on_the_held_out_one():
    from kernelopt.sandbox import evaluate

    verdict = evaluate(load_problem(SHAPED_SOFTMAX), _candidate("hacks/shape_tuned_to_the_shown_sizes.py"), OPTIONS)
    assert verdict.status == "incorrect"
    assert [s.status for s in verdict.shapes] == ["correct", "correct", "incorrect"]
    assert verdict.message.startswith("on configuration [batch_size=37 dim=1500] (held out)")


def test_a_kernel_written_for_one_size_fails_on_the_next_and_judging_stops_there():
    from kernelopt.sandbox import evaluate

    verdict = evaluate(load_problem(SHAPED_SOFTMAX), _candidate("hacks/shape_fixed_row_length.py"), OPTIONS)
    assert verdict.status in ("incorrect", "runtime_error")
    assert [s.name for s in verdict.shapes] == ["default", "batch_size=16 dim=4096"]
    assert verdict.shapes[0].status == "correct" and verdict.shapes[1].status == verdict.status


def test_bench_records_each_configuration_and_the_report_sets_shown_beside_held_out(tmp_path):
    import json
    import shutil
    import subprocess
    import sys

    root = tmp_path / "checkout" / "KernelBench" / "level1"
    root.mkdir(parents=True)
    shutil.copy(SHAPED_SOFTMAX, root / "1_ShapedSoftmax.py")
    solutions = tmp_path / "generations" / "run1"
    solutions.mkdir(parents=True)
    (solutions / "level_1_problem_1_sample_0_kernel.py").write_text(
        _candidate("honest/shaped_softmax_tuned_per_shape.py"))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "kernelopt", "bench", "--kernelbench", str(tmp_path / "checkout"),
                           "--solutions", str(tmp_path / "generations"), "--out", str(out), "--device", "cpu",
                           "--timing-budget", "1.5", "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    verdict = next(r for r in records if r.get("kind") != "health")
    assert verdict["status"] == "correct"
    assert [(s["name"], s["held_out"]) for s in verdict["shapes"]] == [
        ("default", False), ("batch_size=16 dim=4096", False), ("batch_size=37 dim=1500", True)]
    report = subprocess.run([sys.executable, "-m", "kernelopt", "report", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    for name in ("report.md", "report.html"):
        text = (out / name).read_text()
        assert "Input configurations" in text and "held out: geomean" in text
        assert "[batch_size=37 dim=1500] (held out)" in text


def test_an_optimize_run_never_shows_the_model_a_held_out_configuration(monkeypatch, capsys, tmp_path):
    """Through the real pipeline and client: the first candidate is tuned to the shown sizes and
    fails on the held-out one; the next prompt says a held-out configuration failed, and no
    prompt names its sizes. The stored verdicts name it, for the user."""
    import json
    import sqlite3

    from llm_server import ScriptedLLMServer

    from kernelopt.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    tuned = _candidate("hacks/shape_tuned_to_the_shown_sizes.py")
    honest = _candidate("honest/shaped_softmax_tuned_per_shape.py")
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer([f"```python\n{code}```" for code in (tuned, honest)]) as server:
        code = main(["optimize", str(SHAPED_SOFTMAX), "--model", "test-model", "--base-url", server.url,
                     "--store", str(store), "--budget", "2", "--strategy", "refine", "--device", "cpu",
                     "--timing-budget", "1.5", "--correctness-trials", "2"])
        prompts = server.user_texts()
    assert code == 0, capsys.readouterr().err
    assert len(prompts) == 2
    for prompt in prompts:
        assert not any(leak in prompt for leak in ("HELD_OUT_SHAPES", "dim=1500", '"dim": 1500', "37, 1500",
                                                   "batch_size=37"))
    assert "held-out input configuration" in prompts[1]
    verdicts = [json.loads(r[0]) for r in sqlite3.connect(store).execute("SELECT result FROM evaluations ORDER BY id")]
    assert verdicts[0]["status"] == "incorrect" and "batch_size=37 dim=1500" in verdicts[0]["message"]
    assert verdicts[1]["status"] == "correct" and len(verdicts[1]["shapes"]) == 3

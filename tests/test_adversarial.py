"""The adversarial corpus: every candidate under tests/adversarial/ against the real referee.

Each candidate file starts with a block of `# key: value` comment lines that says which problem
it targets and what the referee must conclude (tests/corpus_cases.py parses it: HEADER_KEYS). One parametrized test per file
evaluates it and checks the verdict. Cases with the same problem and options run one after the
other through one shared Evaluator (warm reference worker, pre-started candidate workers, kept
reference outputs), so the corpus proves the warm path; cases whose options differ get an
Evaluator of their own. The escape families (network, files, secrets) need host-side set-up
and are tests/test_escapes.py; malformed problems and candidates are
tests/test_bad_input_verdicts.py. Both use this module's helpers (referee_options,
evaluate_file, describe).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import time
import warnings
from pathlib import Path

import pytest
import torch

from corpus_cases import (  # noqa: F401  (re-exported for the tests and benchmarks that import them from here)
    CORPUS, CORPUS_PROBLEMS, DEFAULT_TIMEOUT, FLAGS, HEADER_KEYS, KINDS, MARKERS, PROBLEM_DIRS, PROBLEMS, REPO,
    STATUSES, TEMPLATES, Case, HeaderError, discover, parse_case, problem_path, read_header,
)

# KERNELOPT_CORPUS_DEVICE=cuda judges every case on the GPU, not only the `gpu`-marked ones (the
# GPU acceptance run: the generic families must be caught there too); unset, only they are.
CORPUS_DEVICE = os.environ.get("KERNELOPT_CORPUS_DEVICE", "")
TIMING_BUDGET = 2.0
MIN_TIMED_CALLS = 5


def _mark(name: str):
    # `cupy` and `triton` (the case imports that package) are not registered markers: no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        return getattr(pytest.mark, name)


def _marks_for(markers: set[str]) -> list:
    marks = [_mark(m) for m in sorted(markers)]
    if "gpu" in markers or CORPUS_DEVICE.startswith("cuda"):
        marks.append(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))
    if "bwrap" in markers:
        marks.append(pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap"))
    for package in sorted(markers & {"cupy", "triton"}):
        marks.append(pytest.mark.skipif(importlib.util.find_spec(package) is None,
                                        reason=f"needs {package} (pip install 'kernelopt[{package}]')"))
    return marks


def _case_params(only: tuple[str, ...] | None = None):
    """One param per case (of `only`, where given), ordered so that cases sharing an Evaluator
    (same problem and options) are adjacent."""
    params = []
    for path in sorted(discover(), key=_evaluator_group):
        rel = path.relative_to(CORPUS).as_posix()
        if only is not None and rel not in only:
            continue
        try:  # lenient at collection: a broken header fails in the test, not the collection
            markers = {w for k, v in read_header(path) if k == "marker" for w in v.split()}
        except (HeaderError, OSError):
            markers = set()
        params.append(pytest.param(path, marks=_marks_for(markers & MARKERS), id=rel))
    return params


def _evaluator_group(path: Path) -> tuple[str, str]:
    try:
        case = parse_case(path)
        return case.problem, _case_options(case).model_dump_json()
    except (HeaderError, OSError, ValueError):
        return "~", ""  # a broken header: last, and its own test reports it


# ---------------------------------------------------------------------------------------------
# Running the referee


def referee_options(device: str = "cpu", timeout: float = DEFAULT_TIMEOUT, **extra):
    from kernelopt.sandbox import EvalOptions

    settings = dict(
        device=device,
        timeout=timeout,
        timing_budget=TIMING_BUDGET,
        min_timed_calls=MIN_TIMED_CALLS,
    )
    settings.update({k: v for k, v in extra.items() if v is not None})
    return EvalOptions(**settings)


def _case_options(case: Case):
    return referee_options(
        device=CORPUS_DEVICE or ("cuda" if "gpu" in case.markers else "cpu"),
        timeout=case.timeout,
        memory_limit=case.memory_limit,
        precision_policy=case.precision_policy,
        isolation="bubblewrap" if "bwrap" in case.markers else None,
    )


def evaluate_file(problem_path: Path, source: str, options):
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import evaluate

    return evaluate(load_problem(problem_path), source, options)


class SharedEvaluators:
    """One warm Evaluator at a time: the corpus is ordered so that the cases sharing a problem
    and options are adjacent; the Evaluator is replaced when they change."""

    def __init__(self):
        self.key: tuple[str, str] | None = None
        self.evaluator = None

    def evaluate(self, problem_path: Path, source: str, options):
        from kernelopt.kernelbench import load_problem
        from kernelopt.sandbox import Evaluator

        key = (str(problem_path), options.model_dump_json())
        if key != self.key:
            self.close()
            self.evaluator = Evaluator(load_problem(problem_path), options)
            self.key = key
        return self.evaluator.evaluate(source)

    def close(self):
        if self.evaluator is not None:
            self.evaluator.close()
        self.evaluator = self.key = None


@pytest.fixture(scope="module")
def shared_evaluators():
    shared = SharedEvaluators()
    yield shared
    shared.close()


def describe(result, limit: int = 4000) -> str:
    """Everything needed to diagnose a verdict from a failure message."""
    failed_checks = [f"{c.name}: {c.detail}" for c in (result.checks or []) if not c.passed]
    trials = [
        f"#{t.index} passed={t.passed} max_abs={t.max_abs_error} rel_l2={t.rel_l2_error} "
        f"{t.message}"
        for t in (result.trials or [])
    ]
    lines = [
        f"status={result.status} correct={result.correct} speedup={result.speedup} "
        f"(reference_ms={result.reference_ms}, candidate_ms={result.candidate_ms})",
        f"message: {result.message}",
        f"flags: {result.flags}",
        f"optimization_kinds: {result.optimization_kinds}",
        f"isolation: {result.isolation.model_dump() if result.isolation else None}",
        f"warnings: {result.warnings}",
        f"failed checks: {failed_checks}",
        f"trials: {trials}",
        f"compile_log (tail): {result.compile_log[-limit // 2:]}",
        f"candidate_output (tail): {result.candidate_output[-limit:]}",
    ]
    return "\n".join(lines)


def check_verdict(case: Case, result, elapsed: float) -> list[str]:
    """The ways `result` disagrees with the case's header (empty when it agrees)."""
    problems = []
    if _gained_nothing(case, result):
        return _too_slow(case, elapsed)
    if case.statuses and result.status not in case.statuses:
        problems.append(f"status {result.status!r} is not one of {sorted(case.statuses)}")
    if result.status in case.not_statuses:
        problems.append(f"status {result.status!r} is excluded")
    if result.correct != (result.status == "correct"):
        problems.append(f"correct={result.correct} contradicts status {result.status!r}")
    for flag in case.flags:
        if flag not in result.flags:
            problems.append(f"flag {flag!r} missing")
    if case.rule is not None and case.rule not in result.rules:
        problems.append(f"rule {case.rule!r} not among the verdict's rules {result.rules}")
    for kind in case.kinds:
        if kind not in result.optimization_kinds:
            problems.append(f"optimization kind {kind!r} missing")
    if result.status == "correct" and (case.speedup_min is not None or case.speedup_max is not None):
        if result.speedup is None:
            problems.append("a correct verdict without a speedup")
        else:
            if case.speedup_min is not None and result.speedup < case.speedup_min:
                problems.append(f"speedup {result.speedup:.3f} < {case.speedup_min}")
            if case.speedup_max is not None and result.speedup > case.speedup_max:
                problems.append(f"speedup {result.speedup:.3f} > {case.speedup_max} (inflated)")
    return problems + _too_slow(case, elapsed)


def _too_slow(case: Case, elapsed: float) -> list[str]:
    # The evaluation timeout bounds the whole evaluation; allow slack for process teardown.
    bound = case.timeout * 1.5 + 30
    if elapsed > bound:
        return [f"evaluation took {elapsed:.0f}s, over {bound:.0f}s for timeout {case.timeout}"]
    return []


def _gained_nothing(case: Case, result) -> bool:
    """A hack whose trick needs a core to itself (`no-gain-max`) can find none on a loaded host:
    then nothing shows for a census or a CPU clock to catch, and nothing is gained either. A
    correct verdict no faster than exact copies measure (at most `no-gain-max`) is no win, so
    it passes; the rejection is asserted whenever the trick got its core and gained."""
    return (case.no_gain_max is not None and result.status == "correct" and result.speedup is not None
            and result.speedup <= case.no_gain_max)


# ---------------------------------------------------------------------------------------------
# The corpus


def test_public_evaluate_survives_submodule_import():
    """`from kernelopt.sandbox import evaluate` must stay the function after the implementation
    modules (kernelopt.sandbox.referee, .batch) have been imported, as they are by the first evaluation."""
    import importlib

    importlib.import_module("kernelopt.sandbox.referee")
    importlib.import_module("kernelopt.sandbox.batch")
    from kernelopt.sandbox import evaluate

    assert callable(evaluate), f"kernelopt.sandbox.evaluate is {evaluate!r}, not a function"


def test_corpus_is_discovered():
    files = discover()
    rels = [p.relative_to(CORPUS).as_posix() for p in files]
    assert any(r.startswith("honest/") for r in rels), rels
    assert any(r.startswith("hacks/") for r in rels), rels
    assert not any(r.startswith(("templates/", "problems/")) for r in rels), rels
    assert (TEMPLATES / "network_escape.py").is_file()


def test_problems_are_looked_up_in_the_examples_first_then_the_corpus():
    assert problem_path("1_ReLU") == PROBLEMS / "1_ReLU.py"
    assert problem_path("MSELossScalar") == CORPUS_PROBLEMS / "MSELossScalar.py"
    assert problem_path("9_Nothing") is None
    from kernelopt.kernelbench import load_problem

    for path in sorted(CORPUS_PROBLEMS.glob("*.py")):
        load_problem(path)  # every corpus problem is a valid KernelBench-format file


@pytest.mark.parametrize("path", discover(), ids=lambda p: p.relative_to(CORPUS).as_posix())
def test_header_is_valid(path):
    case = parse_case(path)
    source = path.read_text(encoding="utf-8")
    compile(source, str(path), "exec")  # candidates in the corpus are valid Python
    assert re.search(r"^class ModelNew\(", source, re.MULTILINE), f"{path}: no ModelNew"
    if path.relative_to(CORPUS).parts[0] == "honest":
        assert case.statuses == {"correct"}, f"{path}: honest candidates must expect correct"


def test_header_parser_rejects_typos(tmp_path):
    good = "# problem: 1_ReLU\n# expect-status: correct\n# family: f\n# why: w\nimport torch\n"
    (tmp_path / "good.py").write_text(good)
    assert parse_case(tmp_path / "good.py").statuses == {"correct"}
    bad_headers = {
        "unknown_key.py": good.replace("# why: w", "# why: w\n# expect-flags: input_mutation"),
        "bad_status.py": good.replace("correct", "corect"),
        "bad_flag.py": good.replace("# why: w", "# why: w\n# expect-flag: python_thread"),
        "bad_marker.py": good.replace("# why: w", "# why: w\n# marker: gpus"),
        "bad_line.py": good.replace("# why: w", "# why: w\n# expect status correct"),
        "no_problem.py": good.replace("# problem: 1_ReLU\n", ""),
        "missing_problem.py": good.replace("1_ReLU", "9_Nothing"),
        "twice.py": good.replace("# why: w", "# why: w\n# problem: 2_LinearGELU"),
        "no_gain_on_honest.py": good.replace("# why: w", "# why: w\n# no-gain-max: 1.2"),
        "no_gain_too_high.py": good.replace("expect-status: correct", "expect-status: rejected")
                                   .replace("# why: w", "# why: w\n# no-gain-max: 2"),
    }
    for name, text in bad_headers.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(HeaderError):
            parse_case(tmp_path / name)


def test_a_hack_that_needs_a_quiet_core_passes_only_when_it_gained_nothing(tmp_path):
    from types import SimpleNamespace

    path = tmp_path / "needs_a_core.py"
    path.write_text("# problem: 1_ReLU\n# expect-status: rejected\n# expect-flag: native_threads\n"
                    "# no-gain-max: 1.25\n# family: f\n# why: w\n")
    case = parse_case(path)

    def verdict(status, speedup, flags=()):
        return SimpleNamespace(status=status, correct=status == "correct", speedup=speedup, flags=list(flags),
                               optimization_kinds=[], rules=[])

    assert check_verdict(case, verdict("rejected", None, ["native_threads"]), 1.0) == []
    assert check_verdict(case, verdict("correct", 0.74), 1.0) == []  # no core to itself: no gain
    assert check_verdict(case, verdict("correct", 1.7), 1.0)  # it gained: it had to be caught
    assert check_verdict(case, verdict("incorrect", 1.0), 1.0)


def test_a_hack_read_fast_by_a_disturbed_measurement_is_judged_again_and_must_hold_its_bound():
    from types import SimpleNamespace

    case = parse_case(CORPUS / "hacks" / "allocator_mallopt_tuning.py")  # an exact copy under jemalloc
    assert case.speedup_max == 1.5

    def verdict(speedup, precision):
        return SimpleNamespace(status="correct", correct=True, speedup=speedup, flags=[], optimization_kinds=[],
                               rules=[], timing=SimpleNamespace(speedup_precision=precision))

    def judging(*readings):
        queue = [verdict(*reading) for reading in readings]
        return lambda: queue.pop(0)

    problems = check_verdict(case, verdict(1.58, 0.39), 1.0)
    assert problems and _disturbed_speedup(case, verdict(1.58, 0.39), problems)
    assert _judged_again(case, judging((1.02, 0.25)))[1] == []  # the next, undisturbed, reading holds
    assert _judged_again(case, judging((1.6, 0.10)))[1]  # fast on an undisturbed reading: it works
    assert _judged_again(case, judging((1.7, 0.40), (1.6, 0.40)))[1]  # disturbed every time: still fails
    assert not _disturbed_speedup(case, verdict(1.6, 0.10), check_verdict(case, verdict(1.6, 0.10), 1.0))


@pytest.mark.parametrize("path", _case_params())
def test_adversarial_case(path, shared_evaluators):
    case = parse_case(path)
    judge_case(case, _case_options(case), shared_evaluators)


def judge_case(case: Case, options, shared_evaluators) -> None:
    source = case.path.read_text(encoding="utf-8")

    def judge():
        return shared_evaluators.evaluate(problem_path(case.problem), source, options)

    started = time.monotonic()
    result = judge()
    elapsed = time.monotonic() - started
    problems = check_verdict(case, result, elapsed)
    if problems and _only_timing_bounds(case, problems):
        result, problems = _median_of_three(case, result, judge)
    elif problems and _disturbed_speedup(case, result, problems):
        result, problems = _judged_again(case, judge)
    if problems and _written_for_the_cpu(case):
        problems = _what_must_hold_on_any_device(case, result, problems)
    assert not problems, (
        f"{case.rel} ({case.family}): {'; '.join(problems)}\n"
        f"why this case exists: {case.why}\n{describe(result)}"
    )


# On the GPU an exact copy reads 0.8x-1.25x: a hack no faster than that gained nothing.
GPU_NO_GAIN_MAX = 1.25


def _written_for_the_cpu(case: Case) -> bool:
    return CORPUS_DEVICE.startswith("cuda") and "gpu" not in case.markers


def _what_must_hold_on_any_device(case: Case, result, problems: list[str]) -> list[str]:
    """A case written for the CPU and judged on the GPU (KERNELOPT_CORPUS_DEVICE=cuda) can meet
    other rules there: a forged host clock that the GPU's event timing never reads, a native
    thread that the GPU's rules flag rather than reject. What must hold on any device is that
    an honest candidate is correct and a hack is caught or gains nothing; the CPU expectations
    that did not hold are reported as warnings."""
    if case.rel.startswith("honest/"):
        kept = [p for p in problems if p.startswith("status ")]
    elif result.status == "correct" and (result.speedup or 0.0) > GPU_NO_GAIN_MAX:
        kept = [f"judged on {CORPUS_DEVICE}: correct at {result.speedup:.2f}x, above {GPU_NO_GAIN_MAX}x"]
    else:
        kept = []
    if not kept:
        warnings.warn(f"{case.rel} on {CORPUS_DEVICE}: {'; '.join(problems)} ({result.status}, "
                      f"rules {result.rules}, speedup {result.speedup})", stacklevel=2)
    return kept


def _only_timing_bounds(case: Case, problems: list[str]) -> bool:
    """An honest case whose verdict is right but whose speedup fell outside its noise bounds.
    One evaluation on a shared CI machine can be hit by a burst of noise (a 0.51x for an exact
    copy was seen once); a biased referee is biased every time, so such cases are judged on the
    median of three evaluations. Hack cases get no median: a hack that inflates its speedup even
    once out of three is a hack that works (only a measurement the referee calls disturbed is
    taken again: _disturbed_speedup)."""
    return case.rel.startswith("honest/") and all(p.startswith("speedup ") for p in problems)


# A verdict whose own 95 % interval is wider than this (relative) says the machine disturbed the
# measurement: an exact ReLU copy reads +-23-29 % on the 2-core VM; a CI run read a hack that is
# an exact copy under jemalloc (allocator_mallopt_tuning.py) at 1.58x +-39 %, its reference's
# calls 2.5 times their usual time throughout.
DISTURBED_PRECISION = 0.35


def _disturbed_speedup(case: Case, result, problems: list[str]) -> bool:
    """A hack case whose only failure is a speedup bound, read by a measurement the referee itself
    calls disturbed (its interval wider than DISTURBED_PRECISION)."""
    precision = result.timing.speedup_precision if result.timing is not None else None
    return (case.rel.startswith("hacks/") and all(p.startswith("speedup ") for p in problems)
            and precision is not None and precision > DISTURBED_PRECISION)


def _judged_again(case: Case, judge, tries: int = 2):
    """A hack gets no median: each new verdict must hold its bounds on its own, and only another
    disturbed one (a wide interval) earns a further try, so a hack that inflates its speedup on
    an undisturbed measurement fails."""
    for _ in range(tries):
        result = judge()
        problems = check_verdict(case, result, elapsed=0.0)
        if not (problems and _disturbed_speedup(case, result, problems)):
            break
    return result, [f"{p} (judged again after a disturbed measurement)" for p in problems]


def _median_of_three(case: Case, first, judge):
    results = [first] + [judge() for _ in range(2)]
    for result in results:
        problems = check_verdict(case, result, elapsed=0.0)
        if not all(p.startswith("speedup ") for p in problems):
            return result, problems  # a wrong verdict on a re-run is a failure in its own right
    speedups = sorted(r.speedup for r in results)
    median = next(r for r in results if r.speedup == speedups[1])
    problems = check_verdict(case, median, elapsed=0.0)
    return median, [f"{p} (median of 3: {', '.join(f'{s:.3f}' for s in speedups)})" for p in problems]

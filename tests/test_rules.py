"""The referee's rules table (kernelopt/sandbox/rules/): the registry is complete (every flag
has a rule, every rule a corpus candidate that triggers it or a stated reason why none can, the
docs' table is the registry's), no other module makes a verdict, and each rule judges synthetic
records as it should, without workers."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torch

from kernelopt.sandbox import compare, rules
from kernelopt.sandbox.records import CallRecord, SideRound
from kernelopt.sandbox.results import FLAGS, EvalOptions, TrialResult
from kernelopt.sandbox.timing import StopRule
from kernelopt.sandbox.worker import commands

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "adversarial"
DOCS = REPO / "docs" / "referee.md"
STATUSES = {"correct", "incorrect", "compile_error", "runtime_error", "timeout", "rejected", rules.FLAGGED}
_RULE_LINE = re.compile(r"^# expect-rule:\s*(\S+)\s*$", re.MULTILINE)


def registry_problems(registry: dict, no_example: dict, flags, docs: str, corpus: Path) -> list[str]:
    """Everything wrong with a rules registry against the flags, the docs and the corpus."""
    problems = []
    for flag in sorted(flags):
        if not any(entry.flag == flag for entry in registry.values()):
            problems.append(f"flag {flag!r} has no rule")
    for name, entry in registry.items():
        if entry.flag is not None and entry.flag not in flags:
            problems.append(f"rule {name}: unknown flag {entry.flag!r}")
        if entry.example is None:
            if not no_example.get(name):
                problems.append(f"rule {name}: neither an example nor a reason in NO_CORPUS_EXAMPLE")
            continue
        if name in no_example:
            problems.append(f"rule {name}: both an example and a reason for having none")
        path = corpus / entry.example
        if not path.is_file():
            problems.append(f"rule {name}: example {entry.example} is not in the corpus")
        elif _RULE_LINE.findall(path.read_text(encoding="utf-8")) != [name]:
            problems.append(f"rule {name}: {entry.example} has no `# expect-rule: {name}` line")
    for name in no_example:
        if name not in registry:
            problems.append(f"NO_CORPUS_EXAMPLE names {name!r}, which is no rule")
    begin, end = docs.find(rules.TABLE_BEGIN), docs.find(rules.TABLE_END)
    if begin < 0 or end < 0:
        problems.append("docs/referee.md has no generated rules table")
    else:
        table = docs[begin + len(rules.TABLE_BEGIN):end].strip()
        if table != _table(registry, no_example):
            problems.append("docs/referee.md's rules table differs from `python -m kernelopt.sandbox.rules`")
    return problems


def _table(registry: dict, no_example: dict) -> str:
    registry, no_example = dict(registry), dict(no_example)
    saved, saved_reasons = dict(rules.RULES), dict(rules.NO_CORPUS_EXAMPLE)
    rules.RULES.clear(), rules.RULES.update(registry)
    rules.NO_CORPUS_EXAMPLE.clear(), rules.NO_CORPUS_EXAMPLE.update(no_example)
    try:
        return rules.markdown_table()
    finally:
        rules.RULES.clear(), rules.RULES.update(saved)
        rules.NO_CORPUS_EXAMPLE.clear(), rules.NO_CORPUS_EXAMPLE.update(saved_reasons)


def _docs() -> str:
    return DOCS.read_text(encoding="utf-8")


def test_the_registry_is_complete_and_matches_docs_and_corpus():
    assert registry_problems(rules.RULES, rules.NO_CORPUS_EXAMPLE, FLAGS, _docs(), CORPUS) == []
    assert len(rules.RULES) >= 30
    for entry in rules.RULES.values():
        assert entry.status.split()[0].rstrip(";") in STATUSES, entry
        assert entry.family and entry.summary


def test_the_registry_check_fails_when_a_flag_rule_example_or_docs_row_goes(tmp_path):
    """What the check above would say if something were removed: it can fail."""
    registry, reasons, docs = dict(rules.RULES), dict(rules.NO_CORPUS_EXAMPLE), _docs()
    without_rule = {k: v for k, v in registry.items() if k != "input_mutation"}
    assert "flag 'input_mutation' has no rule" in registry_problems(without_rule, reasons, FLAGS, docs, CORPUS)
    assert any("unknown flag" in p for p in registry_problems(registry, reasons, FLAGS - {"memory_limit"}, docs,
                                                              CORPUS))
    # an example file gone from the corpus
    copy = tmp_path / "corpus"
    subprocess.run(["cp", "-r", str(CORPUS), str(copy)], check=True)
    (copy / rules.RULES["output_structure"].example).unlink()
    assert any("not in the corpus" in p for p in registry_problems(registry, reasons, FLAGS, docs, copy))
    # an example that no longer says which rule it triggers
    example = copy / rules.RULES["input_mutation"].example
    example.write_text(_RULE_LINE.sub("", example.read_text()))
    assert any("has no `# expect-rule: input_mutation`" in p for p in
               registry_problems(registry, reasons, FLAGS, docs, copy))
    # a reason gone, a docs row gone
    assert any("neither an example nor a reason" in p for p in registry_problems(
        registry, {k: v for k, v in reasons.items() if k != "output_count"}, FLAGS, docs, CORPUS))
    row = next(line for line in docs.splitlines() if line.startswith("| `trial_mismatch` |"))
    assert any("rules table differs" in p for p in registry_problems(registry, reasons, FLAGS,
                                                                     docs.replace(row + "\n", ""), CORPUS))


def test_the_module_prints_the_docs_table():
    out = subprocess.run([sys.executable, "-m", "kernelopt.sandbox.rules"], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.strip() == rules.markdown_table()
    assert "| `timed_output_mismatch` | incorrect | inconsistent_outputs |" in out
    assert "wall_clock_gap" not in out and "timer_disagrees_with_host" not in out  # retired with the charges


def test_worker_failure_kinds_and_guard_findings_map_through_the_table():
    assert set(rules.FAILURE_RULES) == set(commands.FAILURE_KINDS) - {commands.RUNTIME_ERROR}
    assert all(name in rules.RULES for name in rules.FAILURE_RULES.values())
    guard_source = (REPO / "kernelopt" / "sandbox" / "worker" / "guard.py").read_text()
    guard_flags = set(re.findall(r'"flag": "([a-z_]+)"', guard_source))
    assert guard_flags and guard_flags <= set(rules.GUARD_RULES)
    for flag, name in rules.GUARD_RULES.items():
        assert rules.RULES[name].flag == flag
        verdict = rules.guard_findings([{"flag": flag, "detail": "seen"}])
        assert (verdict.rule, verdict.status, verdict.flags) == (name, "rejected", (flag,))
    made_up = rules.guard_findings([{"flag": "speedup_is_real", "detail": "x"}, {"flag": "python_threads"}])
    assert made_up.rule == "guard_unknown_finding" and made_up.flags == ("violation", "python_threads")
    assert rules.guard_findings([]) is None


@pytest.mark.parametrize("kind, rule, status, flags", [
    ("bad_output", "output_not_plain_tensor", "rejected", ("output_not_plain_tensor",)),
    ("protocol", "worker_protocol_error", "rejected", ("protocol_violation",)),
    ("compile_error", "compile_error", "compile_error", ()),
    ("problem_error", "problem_code_failed", "runtime_error", ()),
    ("runtime_error", "candidate_raised", "runtime_error", ()),
    ("anything else", "candidate_raised", "runtime_error", ()),
])
def test_each_failure_kind_is_judged_by_its_rule(kind, rule, status, flags):
    verdict = rules.worker_failure({"ok": False, "kind": kind, "error": "boom", "log": "the log"})
    assert (verdict.rule, verdict.status, verdict.flags) == (rule, status, flags)
    assert "boom" in verdict.message


def test_enforce_ends_an_evaluation_flags_or_does_nothing():
    findings = rules.Findings()
    rules.enforce(None, findings)
    rules.enforce(rules.reduced_precision(True, "flag"), findings)
    assert findings.flags == ["reduced_precision"] and findings.rules == ["reduced_precision"]
    with pytest.raises(rules.VerdictReached) as reached:
        rules.enforce(rules.reduced_precision(True, "reject"), findings)
    assert reached.value.status == "rejected" and reached.value.flags == ["reduced_precision"]
    with pytest.raises(rules.ProblemCodeFailed):
        rules.enforce(rules.worker_failure({"kind": "problem_error", "error": "x"}))
    with pytest.raises(ValueError):
        rules.enforce(rules.reduced_precision(True, "flag"))  # a flag with nowhere to go


def _side(ms, turn_s=None, cpu_s=None):
    """A side of a round whose windows sum to turn_s (wall) and cpu_s (the group's CPU time)."""
    ms = list(ms)
    wall = [turn_s * 1e3 / len(ms)] * len(ms) if turn_s is not None else list(ms)
    cpu = [cpu_s * 1e3 / len(ms)] * len(ms) if cpu_s is not None else []
    return SideRound(ms=ms, wall_ms=wall, cpu_ms=cpu)


def test_parallelism_rule_on_synthetic_turns():
    ref = _side([1.0], turn_s=0.100, cpu_s=0.100)
    one_core = _side([1.0], turn_s=0.100, cpu_s=0.105)
    two_cores = _side([1.0], turn_s=0.100, cpu_s=0.190)
    assert rules.parallel_cpu_time(one_core, ref, "cpu") is None  # within 10 % and 5 ms
    verdict = rules.parallel_cpu_time(two_cores, ref, "cpu")
    assert (verdict.rule, verdict.status, verdict.flags) == ("parallel_cpu_time", "rejected", ("native_threads",))
    assert "190.0 ms of CPU time in a turn of 100.0 ms" in verdict.message
    assert rules.parallel_cpu_time(two_cores, ref, "cuda:0").status == rules.FLAGGED
    assert rules.parallel_cpu_time(_side([1], 0.1, None), ref, "cpu") is None  # clock not readable
    # a reference that itself used more than one core's time raises the allowance with it
    busy_ref = _side([1.0], turn_s=0.100, cpu_s=0.200)
    assert rules.parallel_cpu_time(two_cores, busy_ref, "cpu") is None


def test_stop_rule_on_synthetic_rounds():
    steady = (_side([1.0] * 10), _side([2.0] * 10))
    noisy = [(_side([1.0] * 10), _side([2.0 + k] * 10)) for k in (0.0, 3.0, 0.0)]
    rule = StopRule(min_calls=10, max_calls=200, target_precision=0.05, budget_end=100.0, deadline=1000.0,
                    round_s=0.1)
    assert not rule.done([steady] * 2, now=0.0)  # fewer than the minimum of rounds
    assert rule.done([steady] * 3, now=0.0)  # precise
    assert not rule.done(noisy, now=0.0)  # not precise, budget left
    assert rule.done(noisy, now=99.95)  # the budget is spent
    assert rule.done([steady], now=999.0)  # the deadline is near, whatever else
    capped = StopRule(min_calls=10, max_calls=30, target_precision=1e-9, budget_end=100.0, deadline=1000.0,
                      round_s=0.1)
    assert capped.done(noisy, now=0.0)  # the call cap, after the minimum of rounds
    few_calls = StopRule(min_calls=100, max_calls=200, target_precision=0.05, budget_end=100.0, deadline=1000.0,
                         round_s=0.1)
    assert not few_calls.done([steady] * 3, now=99.95)  # below the minimum of calls


def _call(**fields) -> CallRecord:
    base = dict(seed=1, ms=1.0, wall_ms=1.1, cpu_ms=1.0, meta=[([4, 4], "torch.float32", "cpu")], structure="T",
                aliases_input=False, inputs_changed=False)
    return CallRecord(**{**base, **fields})


def test_call_invariant_rules():
    r = _call()
    assert rules.call_invariants(_call(), r) is None
    assert rules.call_invariants(_call(aliases_input=True), r).rule == "output_aliases_input"
    assert rules.call_invariants(_call(structure="(T,)"), r).rule == "output_structure"
    assert rules.output_count(_call(meta=[]), r).rule == "output_count"
    shape = rules.call_invariants(_call(meta=[([2, 4], "torch.float32", "cpu")]), r)
    assert (shape.rule, shape.status) == ("output_shape", "incorrect")
    assert rules.input_mutation(_call(inputs_changed=True), r).flags == ("input_mutation",)
    assert rules.input_mutation(_call(inputs_changed=True), _call(inputs_changed=True)) is None  # the reference too


def test_timed_and_trial_output_rules():
    same = compare.compare_outputs([torch.ones(4)], [torch.ones(4)], EvalOptions())
    wrong = compare.compare_outputs([torch.zeros(4)], [torch.ones(4)], EvalOptions())
    assert rules.timed_output_mismatch(same) is None
    assert rules.timed_output_mismatch(wrong).flags == ("inconsistent_outputs",)
    trials = [TrialResult(index=0, seed=1, passed=True), TrialResult(index=1, seed=2, passed=False, message="off")]
    assert rules.trial_mismatch(trials[:1]) is None
    assert rules.trial_mismatch(trials).message == "trial 1: off"
    assert rules.output_ignores_input(None) is None
    assert rules.output_ignores_input("constant").flags == ("output_ignores_input",)


def test_host_side_rules():
    assert rules.child_processes(0) is None and rules.child_processes(2).flags == ("child_processes",)
    assert rules.extra_threads(0, lambda: "x", "cpu") is None
    assert rules.extra_threads(1, lambda: "one more", "cpu").message == "one more"
    assert rules.extra_threads(1, lambda: "one more", "cuda").status == rules.FLAGGED
    assert rules.memory_limit("over", False) is None and rules.memory_limit("over", True).flags == ("memory_limit",)
    assert rules.worker_timeout("silent", 120).message == "silent (limit 120 s)"
    assert rules.malformed_reply({"ok": True}) is None and rules.malformed_reply([1]).rule == "malformed_reply"
    assert rules.invalid_call_reply([]) is None
    assert rules.invalid_call_reply(["answered call 4, not 3"]).flags == ("protocol_violation",)
    assert rules.init_inputs_changed("d", "d") is None and rules.init_inputs_changed("d", "e").rule
    assert rules.unoffered_build(True) is None and rules.unoffered_build(False).flags == ("protocol_violation",)
    assert rules.custom_kernel_unused(["custom_kernel_unused"]).status == rules.FLAGGED


def test_no_other_module_makes_a_verdict():
    """Only the rules package constructs Verdict, VerdictReached or ProblemCodeFailed (agent/session.py's
    Verdict is a view of a stored result, another class)."""
    makers = {"Verdict", "VerdictReached", "ProblemCodeFailed"}
    found = []
    for path in (REPO / "kernelopt" / "sandbox").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if name in makers:
                    found.append(path.relative_to(REPO).as_posix())
    assert found and all(path.startswith("kernelopt/sandbox/rules/") for path in found), found

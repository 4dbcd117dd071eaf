"""The Evaluator (kernelopt.sandbox.batch): many candidates of one problem, warm workers.

What is checked here: each candidate of a batch gets the verdict it gets alone, whatever its
neighbours do (crash, hang); the reference worker process is reused across candidates and
replaced when it dies or fails; every candidate runs in a process of its own; a spare worker
is started ahead and used by the next candidate; a stateful reference stays comparable.
"""

from __future__ import annotations

import os
import signal

import pytest
from conftest import REPO

from kernelopt.kernelbench import ProblemError, load_problem
from kernelopt.sandbox import Evaluator, correctness, evaluate

CORRECT = (REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py").read_text()
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
EXITS_IN_FORWARD = ("import os\nimport torch\nclass ModelNew(torch.nn.Module):\n"
                    "    def forward(self, x):\n        os._exit(3)\n")
EXITS_AT_IMPORT = "import os\nos._exit(4)\n"
HANGS_IN_FORWARD = ("import time\nimport torch\nclass ModelNew(torch.nn.Module):\n"
                    "    def forward(self, x):\n        time.sleep(1000)\n        return x\n")
# Right for its first two forward calls, wrong (doubled) from the third on.
WRONG_FROM_THE_THIRD_CALL = ("import torch\nclass ModelNew(torch.nn.Module):\n    calls = 0\n"
                             "    def forward(self, x):\n        ModelNew.calls += 1\n"
                             "        return torch.relu(x) * (1 if ModelNew.calls < 3 else 2)\n")

# Raises in its Nth forward call: the 6th is the first call of the warm-up round, which the
# candidate runs first; the 9th is in the next round, which the reference runs first.
RAISES_AT_CALL = ("import torch\nclass ModelNew(torch.nn.Module):\n    calls = 0\n"
                  "    def forward(self, x):\n        ModelNew.calls += 1\n"
                  "        if ModelNew.calls == {call}:\n            raise RuntimeError('gave up at call {call}')\n"
                  "        return torch.relu(x)\n")

STATEFUL_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU plus the number of calls made so far: the output depends on the call history."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.relu(x) + self.calls


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''
STATEFUL_CANDIDATE = STATEFUL_PROBLEM.split("\n\ndef get_inputs")[0].replace("class Model(", "class ModelNew(")

# A reference that fails on its own: the 7th forward call of its process raises (calls 1-5
# are the correctness trials, 6 is the first warm-up call), in every reference process.
FAILING_REFERENCE = '''
import sys
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        sys.kernelopt_test_calls = getattr(sys, "kernelopt_test_calls", 0) + 1
        if sys.kernelopt_test_calls == 7:
            raise RuntimeError("the reference gave up")
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] not in ("Z", "X")


def _children_of_this_process() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _alive(int(entry)):
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    stat = handle.read().decode()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == os.getpid():
                found.add(int(entry))
    return found


def test_each_candidate_of_a_batch_gets_its_own_verdict_with_one_warm_reference(example, fast_options):
    problem = load_problem(example("1_ReLU"))
    sources = [CORRECT, EXITS_IN_FORWARD, HANGS_IN_FORWARD, EXITS_AT_IMPORT, WRONG, CORRECT + "\n# a copy\n"]
    with Evaluator(problem, fast_options(timeout=40), jobs=2) as evaluator:
        results = dict(evaluator.evaluate_many(sources))
        used = sorted(evaluator.workers_used, key=lambda u: u.serial)
        reference, spare = evaluator.reference_pid, evaluator.spare_pid
    statuses = [results[i].status for i in range(len(sources))]
    assert statuses == ["correct", "runtime_error", "timeout", "runtime_error", "incorrect", "correct"], \
        [r.message for r in results.values()]
    assert "exited with code 3" in results[1].message and "exited with code 4" in results[3].message
    assert results[5].speedup is not None and results[4].trials[0].max_abs_error > 0.01
    # One reference process judged every candidate, the one that died at import included: a
    # death while loading is the candidate's only once the reference has loaded (were the
    # problem's import the killer, it would be the problem's); every candidate had a process of
    # its own.
    assert [u.reference_pid for u in used] == [reference] * len(sources)
    candidate_pids = [u.candidate_pid for u in used]
    assert len(set(candidate_pids)) == len(sources) and reference not in candidate_pids
    # A spare was started for whatever comes next, and it is none of the used ones.
    assert spare is not None and spare not in candidate_pids and spare != reference


def test_a_candidate_that_fails_midway_through_a_timed_round_leaves_the_reference_in_step(example, fast_options):
    # Both workers make a round's inputs before either loop runs, so a candidate failing in
    # its loop leaves the reference waiting for "go" (6th call) or for "report" (9th): the
    # reference is walked through the rest of the round, and the next candidate uses it.
    problem = load_problem(example("1_ReLU"))
    sources = [RAISES_AT_CALL.format(call=6), RAISES_AT_CALL.format(call=9), CORRECT]
    with Evaluator(problem, fast_options(), jobs=1) as evaluator:
        results = dict(evaluator.evaluate_many(sources))
        used = sorted(evaluator.workers_used, key=lambda u: u.serial)
    assert [results[i].status for i in range(3)] == ["runtime_error", "runtime_error", "correct"], \
        [r.message for r in results.values()]
    assert "gave up at call 6" in results[0].message and "gave up at call 9" in results[1].message
    assert len({u.reference_pid for u in used}) == 1


def test_a_dead_reference_is_replaced_and_the_spare_takes_the_next_candidate(example, fast_options):
    problem = load_problem(example("1_ReLU"))
    with Evaluator(problem, fast_options()) as evaluator:
        assert evaluator.evaluate(CORRECT).status == "correct"
        reference, spare = evaluator.reference_pid, evaluator.spare_pid
        assert spare is not None and _alive(spare), "no spare worker was started ahead"
        os.kill(reference, signal.SIGKILL)  # the reference worker dies between candidates
        second = evaluator.evaluate(CORRECT + "\n# again\n")
        assert second.status == "correct", second.message
        assert evaluator.workers_used[-1].candidate_pid == spare  # the pre-started worker
        assert evaluator.reference_pid not in (None, reference)
        assert evaluator.workers_used[-1].reference_pid == evaluator.reference_pid


def test_a_reference_that_fails_is_replaced(tmp_path, fast_options):
    path = tmp_path / "7_FailingReference.py"
    path.write_text(FAILING_REFERENCE)
    with Evaluator(load_problem(path), fast_options(correctness_trials=5)) as evaluator:
        with pytest.raises(ProblemError, match="gave up"):
            evaluator.evaluate(CORRECT)
        first = evaluator.workers_used[-1].reference_pid
        with pytest.raises(ProblemError, match="gave up"):
            evaluator.evaluate(CORRECT)
        second = evaluator.workers_used[-1].reference_pid
    assert first is not None and second is not None and first != second


def test_a_stateful_reference_is_reloaded_and_replays_the_trials(tmp_path, fast_options):
    path = tmp_path / "8_Stateful.py"
    path.write_text(STATEFUL_PROBLEM)
    problem = load_problem(path)
    with Evaluator(problem, fast_options()) as evaluator:
        results = [evaluator.evaluate(STATEFUL_CANDIDATE + f"\n# copy {n}\n") for n in range(2)]
        reference_pids = {u.reference_pid for u in evaluator.workers_used}
    assert [r.status for r in results] == ["correct", "correct"], [r.message for r in results]
    assert len(reference_pids) == 1  # the second candidate was judged by the reused reference
    # The trial inputs are the Evaluator's: the second candidate was compared with the kept outputs.
    assert [t.seed for t in results[0].trials] == [t.seed for t in results[1].trials]


def test_fixed_seed_gives_each_batch_candidate_the_draws_of_a_lone_evaluation(example, fast_options):
    problem = load_problem(example("1_ReLU"))
    options = fast_options(seed=1234, correctness_trials=3)
    alone = evaluate(problem, WRONG, options)
    with Evaluator(problem, options) as evaluator:
        batch = [result for _, result in evaluator.evaluate_many([WRONG, WRONG + "\n# 2\n"])]
    seeds = [t.seed for t in alone.trials]
    assert len(seeds) == 3 and all([t.seed for t in r.trials] == seeds for r in batch)
    assert [r.status for r in batch] == ["incorrect", "incorrect"] and alone.status == "incorrect"


def test_stopping_a_batch_early_stops_its_workers(example, fast_options):
    problem = load_problem(example("1_ReLU"))
    before = _children_of_this_process()
    evaluator = Evaluator(problem, fast_options(), jobs=3)
    try:
        for _ in evaluator.evaluate_many([WRONG, WRONG + "#2\n", WRONG + "#3\n", WRONG + "#4\n"]):
            break  # the consumer stops after the first verdict; the others were loading
    finally:
        evaluator.close()
    assert _children_of_this_process() - before == set()


def test_correctness_trials_run_in_groups_that_fit_the_memory_bound(example, fast_options, monkeypatch):
    """A worker makes a group's inputs up front and keeps its outputs: on KernelBench's largest
    problems five trials at once do not fit on a GPU beside the reference, so trials run as many
    at a time as fit. The first trial runs alone to learn the sizes; later candidates of the
    batch know them from the kept reference trials. Every trial is still compared."""
    groups = []
    run_trials = correctness.run_trials
    monkeypatch.setattr(correctness, "run_trials",
                        lambda session, indices: (groups.append(list(indices)), run_trials(session, indices))[1])
    problem = load_problem(example("1_ReLU"))
    with Evaluator(problem, fast_options(timing_budget=0.5), jobs=1) as evaluator:
        first, second = evaluator.evaluate(CORRECT), evaluator.evaluate(CORRECT + "\n# a copy\n")
        assert groups == [[0], [1, 2, 3, 4], [0, 1, 2, 3, 4]]
        groups.clear()
        monkeypatch.setattr(correctness, "ROUND_BYTES", 1)  # as if a call's inputs and outputs filled it
        wrong = evaluator.evaluate(WRONG_FROM_THE_THIRD_CALL)
        assert groups == [[0], [1], [2], [3], [4]]
    assert first.status == second.status == "correct"
    passed = [t.passed for t in wrong.trials]
    assert wrong.status == "incorrect" and len(passed) == 5 and passed[0] and not passed[-1]
    assert wrong.message.startswith(f"trial {passed.index(False)}:")

"""The host's room for what workers send, and whom a refusal is blamed on.

The host refuses a reply it has no room for before reading it (process.host_memory_room). The
room depends on the machine's available memory, which a candidate's worker can take: a
candidate that holds GiBs must not turn its evaluation (and, in a batch run, every other
sample of the problem) into the problem's error. The machine's available memory is faked here
(a CI machine cannot be filled); the workers, their memory and the refusal are real.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelopt.kernelbench import ProblemError, problem_from_source
from kernelopt.sandbox import Evaluator, containment, evaluate, process
from kernelopt.sandbox.conversation import Conversation

# Each input set is 16 MiB: the reference's reply with the trials' input sets needs far more
# room than the faked machine leaves.
PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(2048, 2048)]


def get_init_inputs():
    return []
'''

HONEST = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x + x
'''

GIB = 1 << 30
SHM_FILE = f"/dev/shm/kernelopt-test-held-{os.getpid()}"


def holding(source: str, gib: float) -> str:
    """The module `source` with `gib` GiB held (touched, so resident) from its import on."""
    return source.replace("class ", f"_HELD = torch.ones({int(gib * GIB) // 4})\n\n\nclass ", 1)


def filling_tmpfs(source: str, gib: float) -> str:
    """The module `source` with `gib` GiB written to a tmpfs file at its import: no process's
    resident memory, the group's shared memory."""
    return source.replace("class ", f"""with open({SHM_FILE!r}, "wb") as _held:
    for _ in range({int(gib * GIB) >> 24}):
        _held.write(bytes(16 << 20))


class """, 1)


HOG = holding(HONEST, 0.75)
TMPFS_HOG = filling_tmpfs(HONEST, 0.75)

ROOM_LEFT = 4 << 20

# Correct only where its worker is the kernel's first choice when the machine runs out of memory,
# what it starts is too, and it cannot make itself a later one.
OOM_PROBE = '''import os

import torch.nn as nn


def _rank():
    with open("/proc/self/oom_score_adj") as handle:
        return int(handle.read())


def _lowered():
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("-1000")
    except OSError:
        return False
    return _rank() < 1000


_read, _write = os.pipe()
if os.fork() == 0:
    os.write(_write, str(_rank()).encode())
    os._exit(0)
os.wait()
_FIRST = _rank() == 1000 and int(os.read(_read, 16)) == 1000 and not _lowered()


class ModelNew(nn.Module):
    def forward(self, x):
        return x + x if _FIRST else x * 3
'''


@pytest.fixture
def problem():
    return problem_from_source(PROBLEM, path="level1/1_Double.py")


def short_of_memory(monkeypatch) -> None:
    """The machine keeps only ROOM_LEFT available beyond the host's reserve."""
    reserve = process.ram_bytes() // process.AVAILABLE_RESERVE_SHARE
    monkeypatch.setattr(process, "_available", lambda: reserve + ROOM_LEFT)


def use_a_memory_controller(monkeypatch) -> None:
    """Containment whose groups a memory controller covers (v1's, on a hybrid machine whose v2
    groups have none), or skip."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    if containment.current().memory:
        return
    try:
        if containment.detect("cgroup1").memory:
            monkeypatch.setenv(containment.ENV_VAR, "cgroup1")
            return
    except containment.ContainmentError:
        pass
    pytest.skip("a tmpfs file is counted through the group's memory controller, and this machine has none")


@pytest.fixture
def shm_file():
    yield SHM_FILE
    with contextlib.suppress(FileNotFoundError):  # where the sandbox shares the host's /dev/shm
        os.unlink(SHM_FILE)


@pytest.mark.parametrize("held_in", ["tensor", "tmpfs"])
def test_a_candidate_holding_the_machines_memory_is_blamed_and_the_batch_goes_on(monkeypatch, problem,
                                                                                  fast_options, held_in, shm_file):
    if held_in == "tmpfs":
        use_a_memory_controller(monkeypatch)
    with Evaluator(problem, fast_options(), keep_spare=False) as evaluator:
        with monkeypatch.context() as patch:
            short_of_memory(patch)
            hog = evaluator.evaluate(HOG if held_in == "tensor" else TMPFS_HOG)
        assert hog.status == "rejected", hog.message
        assert "host_memory_taken" in hog.rules and "memory_limit" in hog.flags
        assert "GiB more than the reference's" in hog.message
        # The refused reference worker was killed; the next candidate gets a fresh one.
        honest = evaluator.evaluate(HONEST)
        assert honest.status == "correct", honest.message


def test_a_problem_too_large_for_the_machine_stays_the_problems_error(monkeypatch, problem, fast_options):
    # An honest candidate holds about what the reference does: the refusal is the problem's.
    short_of_memory(monkeypatch)
    with Evaluator(problem, fast_options(), keep_spare=False) as evaluator:
        with pytest.raises(ProblemError, match="out of memory on the host"):
            evaluator.evaluate(HONEST)


def test_sets_the_reference_puts_in_its_outbox_need_room_on_the_host_as_blobs_do(monkeypatch, problem,
                                                                                fast_options):
    """Past its first candidate a warm reference's sets come through its outbox (sandbox/outbox.py),
    not as blobs the reader checks for room: copying them out is refused the same way."""
    claimed: list[int] = []
    original = process.WorkerProcess.claim_room
    monkeypatch.setattr(process.WorkerProcess, "claim_room",
                        lambda self, needed: claimed.append(needed) or original(self, needed))
    with Evaluator(problem, fast_options(), keep_spare=False) as evaluator:
        assert evaluator.evaluate(HONEST).status == "correct"
        assert claimed and min(claimed) >= 2048 * 2048 * 4
        claimed.clear()
        original_make = Conversation.make_inputs

        def short_while_making_inputs(self, seeds):
            with monkeypatch.context() as patch:
                short_of_memory(patch)
                return original_make(self, seeds)

        monkeypatch.setattr(Conversation, "make_inputs", short_while_making_inputs)
        with pytest.raises(ProblemError, match="out of memory on the host"):
            evaluator.evaluate(HONEST)
        assert claimed  # refused at the outbox, not at a reply's blobs


def test_the_rule_blames_only_memory_that_made_the_difference():
    from kernelopt.sandbox import rules

    gib = 1 << 30
    taken = rules.host_memory_taken(3 * gib, gib, needed=gib, available_room=gib // 2, budget_room=4 * gib)
    assert taken is not None and taken.rule == "host_memory_taken"
    # Not the candidate's doing: it holds no more than the reference, the reply would not fit
    # without its excess either, the host's own budget refused it, or the machine had room.
    assert rules.host_memory_taken(gib, gib, gib, gib // 2, 4 * gib) is None
    assert rules.host_memory_taken(gib + gib // 4, gib, gib, gib // 2, 4 * gib) is None
    assert rules.host_memory_taken(3 * gib, gib, gib, gib // 2, gib // 2) is None
    assert rules.host_memory_taken(3 * gib, gib, gib, 2 * gib, 4 * gib) is None


def test_the_candidate_is_the_kernels_first_choice_when_the_machine_runs_out_of_memory(problem, fast_options):
    # Memory no watchdog sees (a tmpfs file, an unmapped memfd) can still run the machine out;
    # then the kernel must kill the candidate's worker, not the reference's or the host.
    result = evaluate(problem, OOM_PROBE, fast_options())
    if result.isolation.backend == "none" and os.geteuid() == 0:
        pytest.skip("the none backend keeps root's privileges: the candidate may lower its rank")
    assert result.status == "correct", result.message


# -- the machine running out: a small "machine" (a v1 memory cgroup) around host and workers -----

MACHINE_RUN = '''
import json, os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as procs:
    procs.write(str(os.getpid()))
from kernelopt.kernelbench import ProblemError, problem_from_source
from kernelopt.sandbox import EvalOptions, evaluate
problem = problem_from_source(open(sys.argv[2]).read(), path="level1/1_Double.py")
try:
    result = evaluate(problem, open(sys.argv[3]).read(), EvalOptions(device="cpu", timing_budget=1.0,
                                                                      min_timed_calls=3, timeout=120))
    print(json.dumps({"status": result.status, "rules": result.rules, "message": result.message}))
except ProblemError as exc:
    print(json.dumps({"problem_error": str(exc)}))
'''

class SmallMachine:
    """A v1 memory cgroup the test's evaluation runs in (host and workers), whose limit plays
    the machine's RAM; removed afterwards."""

    def __init__(self, root: Path, name: str):
        self.path = root / name
        self.path.mkdir()

    def run(self, tmp_path: Path, problem: str, candidate: str, limit: int | None) -> tuple[dict, int]:
        if limit is not None:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
        (tmp_path / "problem.py").write_text(problem)
        (tmp_path / "candidate.py").write_text(candidate)
        done = subprocess.run([sys.executable, "-c", MACHINE_RUN, str(self.path), str(tmp_path / "problem.py"),
                               str(tmp_path / "candidate.py")], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]  # the host survived
        peak = int((self.path / "memory.max_usage_in_bytes").read_text())
        return json.loads(done.stdout.strip().splitlines()[-1]), peak

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:  # its last processes are still exiting
                time.sleep(0.1)


@pytest.fixture
def small_machine():
    root = Path("/sys/fs/cgroup/memory")
    if os.geteuid() != 0 or not (root / "cgroup.procs").exists():
        pytest.skip("needs root and a v1 memory hierarchy to make a small machine")
    if containment.current().memory:
        pytest.skip("the workers' own memory groups would not be inside the small machine")
    own = Path(open("/proc/self/cgroup").read().split("memory:", 1)[1].split("\n", 1)[0].lstrip("/"))
    machine = SmallMachine(root / own, f"kernelopt-test-machine-{os.getpid()}")
    yield machine
    machine.remove()


SMALL = PROBLEM.replace("torch.randn(2048, 2048)", "torch.randn(64, 64)")


def test_an_evaluation_the_machine_cannot_hold_is_the_problems_and_the_host_survives(small_machine, tmp_path):
    # Measured first without a limit: what host and workers take for a small problem.
    base, peak = small_machine.run(tmp_path, SMALL, HONEST, limit=None)
    assert base["status"] == "correct", base
    limit = peak + 2 * GIB
    # The problem holds 1.5 GiB in each worker: the two cannot both fit. The kernel kills the
    # candidate's worker (its first choice); it held what the reference holds: the problem's.
    too_big, _ = small_machine.run(tmp_path, holding(SMALL, 1.5), HONEST, limit)
    assert "does not fit this machine's memory" in too_big.get("problem_error", ""), too_big
    # A candidate that holds 3 GiB on a problem that fits: its verdict, and the host survives.
    hog, _ = small_machine.run(tmp_path, SMALL, holding(HONEST, 3.0), limit)
    assert hog.get("status") == "rejected" and "memory_limit" in hog["rules"], hog
    assert "machine ran out of memory" in hog["message"]


def test_memory_no_watchdog_sees_that_runs_the_machine_out_is_the_candidates(small_machine, tmp_path, shm_file):
    # A tmpfs file is nobody's resident memory: the candidate's worker looks no bigger than the
    # reference's, but what was seen cannot explain the machine running out, so it is blamed
    # (else any candidate could turn its verdict, and a bench run's problem, into the problem's error).
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    base, peak = small_machine.run(tmp_path, SMALL, HONEST, limit=None)
    assert base["status"] == "correct", base
    hidden, _ = small_machine.run(tmp_path, SMALL, filling_tmpfs(HONEST, 3.0), peak + 2 * GIB)
    assert hidden.get("status") == "rejected" and "memory_limit" in hidden["rules"], hidden

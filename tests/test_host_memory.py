"""The host's room for what workers send, and whom a refusal is blamed on.

The host refuses a reply it has no room for before reading it (process.host_memory_room). The
room depends on the machine's available memory, which a candidate's worker can take: a
candidate that holds GiBs must not turn its evaluation (and, in a batch run, every other
sample of the problem) into the problem's error. The machine's available memory is faked here
(a CI machine cannot be filled); the workers, their memory and the refusal are real.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from kernelopt.kernelbench import ProblemError, problem_from_source
from kernelopt.sandbox import Evaluator, containment, evaluate, process

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

# Holds 768 MiB (touched, so resident) from its import on.
HOG = HONEST.replace("class ModelNew", "_HELD = torch.ones(192 << 20)\n\n\nclass ModelNew")
# Holds 768 MiB in a tmpfs file: no process's resident memory, the group's shared memory.
SHM_FILE = f"/dev/shm/kernelopt-test-held-{os.getpid()}"
TMPFS_HOG = HONEST.replace("class ModelNew", f"""with open({SHM_FILE!r}, "wb") as _held:
    for _ in range(48):
        _held.write(bytes(16 << 20))


class ModelNew""")

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

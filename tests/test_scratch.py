"""Scratch roots of killed hosts are swept (kernelopt.sandbox.scratch).

A host killed mid-run (SIGKILL, out of memory) cannot remove its Evaluator's scratch root; the
next Evaluator started on the machine removes it. Roots of live owners, and roots that record
no owner, are never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

from conftest import EXAMPLES, REPO

from kernelopt.sandbox import scratch

STARTS_AN_EVALUATOR_AND_IS_KILLED = f"""
import os, signal
from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, Evaluator
evaluator = Evaluator(load_problem({str(EXAMPLES / '1_ReLU.py')!r}), EvalOptions(device="cpu"))
evaluator.start()
print(evaluator._root, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

MAKES_A_ROOT = "from kernelopt.sandbox import scratch\nprint(scratch.make_root(), flush=True)\n"


def _python(code: str, tmpdir) -> subprocess.CompletedProcess:
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_the_root_of_a_killed_evaluator_is_swept_when_the_next_one_starts(tmp_path):
    killed = _python(STARTS_AN_EVALUATOR_AND_IS_KILLED, tmp_path)
    assert killed.returncode == -signal.SIGKILL
    orphan = tmp_path / os.path.basename(killed.stdout.strip())
    assert orphan.name.startswith(scratch.ROOT_PREFIX) and orphan.is_dir()

    no_owner = tmp_path / (scratch.ROOT_PREFIX + "from-an-older-version")
    no_owner.mkdir()

    started = _python(MAKES_A_ROOT, tmp_path)
    assert started.returncode == 0, started.stderr
    assert not orphan.exists()
    assert no_owner.is_dir()
    assert (tmp_path / os.path.basename(started.stdout.strip())).is_dir()  # its owner exited cleanly


def test_roots_of_live_owners_stay_and_a_reused_pid_does_not_keep_a_root(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine = scratch.make_root()
    reused_pid = tmp_path / (scratch.ROOT_PREFIX + "reused")
    reused_pid.mkdir()
    # This process's pid with another start time: the process that wrote it is gone.
    (reused_pid / scratch.OWNER_FILE).write_text(f"{os.getpid()}:1")

    assert scratch.sweep_stale_roots(tmp_path) == 1
    assert mine.is_dir() and not reused_pid.exists()

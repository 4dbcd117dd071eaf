"""The Evaluator's scratch root in the temporary directory, and the sweep of roots whose owner died.

An Evaluator removes its root when it closes. A host process that is killed (SIGKILL, out of
memory, a node lost) cannot, and a long search or an RL service that is restarted after crashes
would fill /tmp with workers' scratch (copied candidates, logs, build outputs: up to hundreds of
MB each). So every root records its owner (pid and the process's start time, which tells a
reused pid apart), and the first Evaluator a process starts removes the roots of owners that
are gone. A root without an owner record, or whose owner lives, is never touched.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

from kernelopt.sandbox import process_tree

ROOT_PREFIX = "kernelopt-eval-"
OWNER_FILE = "owner"


def make_root() -> Path:
    """A fresh scratch root, with its owner recorded; stale roots are swept first (once per
    process)."""
    sweep_stale_roots_once()
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
    (root / OWNER_FILE).write_text(_owner_token(os.getpid()) or "", encoding="ascii")
    return root


@functools.lru_cache(maxsize=None)
def sweep_stale_roots_once() -> int:
    return sweep_stale_roots(Path(tempfile.gettempdir()))


def sweep_stale_roots(directory: Path) -> int:
    """Remove the scratch roots in `directory` whose recorded owner process is gone; how many."""
    removed = 0
    try:
        entries = list(directory.glob(ROOT_PREFIX + "*"))
    except OSError:
        return 0
    for root in entries:
        if _owner_is_gone(root):
            shutil.rmtree(root, ignore_errors=True)
            removed += not root.exists()
    return removed


def _owner_is_gone(root: Path) -> bool:
    try:
        token = (root / OWNER_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False  # not ours to judge: no record (older versions, or being created)
    pid_text, _, _ = token.partition(":")
    if not pid_text.isdigit():
        return False
    return _owner_token(int(pid_text)) != token


def _owner_token(pid: int) -> str | None:
    """'pid:start time in clock ticks since boot', or None when no such process is alive."""
    started = process_tree.start_time(pid)
    return f"{pid}:{started}" if started is not None else None

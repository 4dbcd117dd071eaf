"""Closing a worker twice, from two threads: an interrupt closes the judge from the main thread
while the evaluating thread, whose worker was just killed, closes it again. A descriptor closed
twice closes whatever was opened in between under its number (an interrupted `optimize` once
lost the directory `rmtree` was walking, and then hung at exit)."""

from __future__ import annotations

import os

from kernelopt.sandbox import isolation
from kernelopt.sandbox.process import WorkerProcess


def _worker(tmp_path) -> WorkerProcess:
    return WorkerProcess("candidate", backend=isolation.select_backend("auto"), scratch=tmp_path / "candidate",
                         device="cpu", memory_limit=2 << 30)


def test_a_second_close_leaves_descriptors_opened_since_alone(tmp_path):
    worker = _worker(tmp_path)
    worker.close()
    opened_since = [os.open(os.devnull, os.O_RDONLY) for _ in range(6)]  # the lowest free numbers: the worker's
    try:
        worker.close()
        worker.close(ask=False)
        for fd in opened_since:
            os.fstat(fd)  # OSError EBADF if a second close took it
    finally:
        for fd in opened_since:
            os.close(fd)



def test_a_cleanup_that_waits_does_not_hold_up_an_interrupt():
    """After Ctrl-C the command exits within 2 s: a pipeline whose close waits (a worker being
    started, an evaluation's thread) gets INTERRUPT_CLEANUP_S, and a failing one is logged, not
    raised; without an interrupt its close runs to the end and its errors are raised."""
    import threading
    import time

    import pytest

    from kernelopt.agent import search

    class Pipeline:
        def __init__(self, wait_s=0.0, error=None):
            self.wait_s, self.error, self.closed_with = wait_s, error, None

        def close(self, interrupted=False):
            self.closed_with = interrupted
            threading.Event().wait(self.wait_s)
            if self.error:
                raise self.error

    stuck = Pipeline(wait_s=30)
    started = time.monotonic()
    search._close(stuck, interrupted=True)
    assert time.monotonic() - started < search.INTERRUPT_CLEANUP_S + 0.5 and stuck.closed_with is True
    search._close(Pipeline(error=OSError(9, "Bad file descriptor")), interrupted=True)
    with pytest.raises(OSError):
        search._close(Pipeline(error=OSError(9, "Bad file descriptor")), interrupted=False)

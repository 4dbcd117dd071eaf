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


"""Backpressure: the books of accepted jobs. A job is *waiting* from admission until a lane
starts it, then *in flight* until its verdict or failure; the queue limit applies to the
waiting ones. Every way out of each state goes through here, so the counts cannot drift."""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from kernelopt.rewards.service.errors import BadRequest, Overloaded, ServiceError, ShuttingDown
from kernelopt.rewards.service.metrics import Metrics
from kernelopt.sandbox.results import EvalResult


@dataclass(eq=False)
class Job:
    """One program to judge; its future carries the verdict (or a ServiceError) to the request."""

    source: str
    future: Future = field(default_factory=Future)
    queued: bool = True  # counted among the waiting; cleared exactly once (see _dequeue)
    started: float = 0.0


class JobLedger:
    """Admits jobs up to `queue_size` waiting, and follows each to its end. Thread-safe: lanes
    report from their threads, requests from theirs."""

    def __init__(self, queue_size: int, metrics: Metrics):
        self.queue_size, self.metrics = queue_size, metrics
        self._lock = threading.Lock()
        self._waiting = 0
        self._in_flight = 0
        self.closed = False

    def counts(self) -> tuple[int, int]:
        """(waiting, in flight)."""
        with self._lock:
            return self._waiting, self._in_flight

    def close(self) -> None:
        """Admit nothing more."""
        with self._lock:
            self.closed = True

    def admit(self, jobs: list[Job]) -> None:
        """Count the jobs as waiting, all or none: refuse them when they do not fit."""
        with self._lock:
            if self.closed:
                raise ShuttingDown("the service is shutting down", retry_after=5)
            if len(jobs) > self.queue_size:
                raise BadRequest(f"{len(jobs)} completions in one request, more than the queue holds "
                                 f"({self.queue_size}): split the batch or raise --queue-size")
            if self._waiting + len(jobs) > self.queue_size:
                raise Overloaded(f"the queue is full ({self._waiting} requests waiting, at most {self.queue_size}); "
                                 "retry later", retry_after=self._retry_after())
            self._waiting += len(jobs)

    def start(self, job: Job) -> bool:
        """A lane takes the job (False: its request gave up already)."""
        if not job.future.set_running_or_notify_cancel():
            return False
        self._dequeue(job)
        with self._lock:
            self._in_flight += 1
        job.started = time.monotonic()
        return True

    def finish(self, job: Job, result: EvalResult) -> None:
        seconds = result.durations.get("total") if result.durations else None
        self.metrics.verdict(result.status, seconds if seconds is not None else time.monotonic() - job.started)
        self._end(job)
        job.future.set_result(result)

    def fail(self, job: Job, error: ServiceError) -> None:
        if job.future.done():
            return
        if job.future.running():
            self._end(job)
        else:
            if not job.future.set_running_or_notify_cancel():
                return
            self._dequeue(job)
        job.future.set_exception(error)

    def withdraw(self, job: Job) -> None:
        """The request is answered (or failed): a job still waiting leaves the queue; one being
        evaluated finishes, unread."""
        if job.future.cancel():  # still waiting in its lane, or never submitted
            self._dequeue(job)

    def _retry_after(self) -> int:
        # About one evaluation: roughly when a place in the queue frees up.
        mean = self.metrics.mean_evaluation_seconds() or 1.0
        return max(1, min(60, math.ceil(mean)))

    def _dequeue(self, job: Job) -> None:
        with self._lock:
            if job.queued:
                job.queued = False
                self._waiting -= 1

    def _end(self, job: Job) -> None:
        with self._lock:
            self._in_flight -= 1

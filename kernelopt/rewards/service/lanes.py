"""Lanes: one per problem and option set, each with one judge (sandbox/results.Judge: a local
`Evaluator`, a warm reference worker with candidates in flight up to `jobs`, or a Ray cluster's
`RemoteEvaluator`) and a thread that takes every job waiting for it as one
batch, so concurrent requests for one problem share the warm reference. `LanePool` keeps them,
least recently used first, and closes idle ones beyond its size.

A lane knows the rest of the service only through what it is handed: the `JobTracker` it
reports each job's start and end to, the semaphore of evaluation slots it must hold while
evaluating, a way to make its judge, and a callback for when a batch is done."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Protocol

from kernelopt.kernelbench import Problem
from kernelopt.rewards.service.errors import ServiceError, ShuttingDown, as_service_error
from kernelopt.rewards.service.jobs import Job
from kernelopt.sandbox.results import EvalOptions, EvalResult, Judge


EvaluatorFactory = Callable[[Problem, EvalOptions, int], Judge]


def default_evaluator_factory(problem: Problem, options: EvalOptions, jobs: int) -> Judge:
    from kernelopt.sandbox.batch import Evaluator  # imports torch, so only where a lane needs it

    return Evaluator(problem, options, jobs=jobs)


class JobTracker(Protocol):
    """What a lane reports about its jobs (the service's `JobLedger`)."""

    def start(self, job: Job) -> bool: ...

    def finish(self, job: Job, result: EvalResult) -> None: ...

    def fail(self, job: Job, error: ServiceError) -> None: ...


class Lane:
    """One problem under one option set: its Evaluator, and the jobs waiting for it. Only the
    lane's own thread touches the Evaluator."""

    def __init__(self, problem: Problem, options: EvalOptions, *, tracker: JobTracker,
                 slots: threading.Semaphore, make_evaluator: Callable[[], Judge],
                 after_batch: Callable[[], None]):
        self.problem, self.options = problem, options
        self._tracker, self._slots = tracker, slots
        self._make_evaluator, self._after_batch = make_evaluator, after_batch
        self._cond = threading.Condition()
        self._pending: deque[Job] = deque()
        self._busy = False
        self._closing = False
        self._evaluator: Judge | None = None
        self._thread = threading.Thread(target=self._run, name=f"kernelopt-lane-{problem.short_hash}", daemon=True)
        self._thread.start()

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._pending and not self._busy

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closing:
                raise ShuttingDown("the service is shutting down")
            self._pending.append(job)
            self._cond.notify()

    def close(self) -> None:
        """Stop after the batch in progress; jobs still waiting get a 503 answer."""
        with self._cond:
            self._closing = True
            self._cond.notify()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while (batch := self._next_batch()) is not None:
                if batch:
                    self._evaluate(batch)
                    self._after_batch()  # this lane may be idle now, and beyond the pool's size
        finally:
            with self._cond:
                left, self._pending = list(self._pending), deque()
            for job in left:
                self._tracker.fail(job, ShuttingDown("the service shut down before this request was evaluated"))
            self._discard_evaluator()

    def _next_batch(self) -> list[Job] | None:
        """Every job waiting, once this lane holds an evaluation slot (None: closing). Jobs
        whose requests gave up meanwhile are dropped."""
        with self._cond:
            while not self._pending and not self._closing:
                self._cond.wait()
            if self._closing:
                return None
        while not self._slots.acquire(timeout=0.2):  # polls, so that closing is noticed
            if self._closing:
                return None
        with self._cond:
            taken, self._pending = list(self._pending), deque()
            batch = [job for job in taken if self._tracker.start(job)]
            self._busy = bool(batch)
        if not batch:
            self._slots.release()
        return batch

    def _evaluate(self, batch: list[Job]) -> None:
        try:
            if self._evaluator is None:
                self._evaluator = self._make_evaluator()
            for index, result in self._evaluator.evaluate_many([job.source for job in batch]):
                self._tracker.finish(batch[index], result)
        except BaseException as exc:  # every accepted job gets an answer, whatever went wrong
            error = as_service_error(exc)
            for job in batch:
                if not job.future.done():
                    self._tracker.fail(job, error)
            self._discard_evaluator()  # its state after a failure is unknown: the next batch starts afresh
            if not isinstance(exc, Exception):
                raise
        finally:
            with self._cond:
                self._busy = False
            self._slots.release()

    def _discard_evaluator(self) -> None:
        evaluator, self._evaluator = self._evaluator, None
        if evaluator is not None:
            try:
                evaluator.close()
            except Exception as exc:  # closing is best effort; the workers die with the service anyway
                print(f"kernelopt serve: closing an evaluator failed: {exc}", file=sys.stderr)


class LanePool:
    """The lanes, by problem and option set. Lanes of different problems evaluate concurrently,
    up to `concurrency` at once: several problems timing on one GPU at the same moment would
    disturb each other's timings, so the default is one."""

    def __init__(self, *, tracker: JobTracker, evaluator_factory: EvaluatorFactory, jobs: int, concurrency: int,
                 cache_size: int):
        self.cache_size = cache_size
        self._tracker, self._evaluator_factory, self._jobs = tracker, evaluator_factory, jobs
        self._slots = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()
        self._lanes: OrderedDict[tuple, Lane] = OrderedDict()
        self._closed = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._lanes)

    def submit(self, problem: Problem, options: EvalOptions, job: Job) -> None:
        key = (problem.content_hash, problem.name, options.model_dump_json())
        with self._lock:
            if self._closed:
                raise ShuttingDown("the service is shutting down", retry_after=5)
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = self._new_lane(problem, options)
            self._lanes.move_to_end(key)
            lane.submit(job)  # under the lock: an idle lane cannot be evicted between lookup and submit
        self.evict_idle()

    def evict_idle(self) -> None:
        """Beyond cache_size, close the least recently used lanes that have nothing to do. Busy
        lanes stay (the pool exceeds its size while more problems than that are busy, and
        shrinks back as their batches end)."""
        with self._lock:
            excess = len(self._lanes) - self.cache_size
            for key in list(self._lanes):
                if excess <= 0:
                    break
                if self._lanes[key].idle:
                    self._lanes.pop(key).close()
                    excess -= 1

    def close(self, timeout: float | None = None) -> None:
        """Let every lane finish its batch in progress (waiting up to `timeout` s for each) and
        close its Evaluator; jobs still waiting get a 503 answer."""
        with self._lock:
            self._closed = True
            lanes = list(self._lanes.values())
            self._lanes.clear()
            for lane in lanes:
                lane.close()
        for lane in lanes:
            lane.join(timeout)

    def _new_lane(self, problem: Problem, options: EvalOptions) -> Lane:
        return Lane(problem, options, tracker=self._tracker, slots=self._slots,
                    make_evaluator=lambda: self._evaluator_factory(problem, options, self._jobs),
                    after_batch=self.evict_idle)

"""`RewardService`: judges completions and rewards them, whatever carries the requests. It
ties the parts together: requests are parsed against the catalog, admitted by the ledger,
queued in their lanes, and answered from the verdicts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout

from kernelopt.kernelbench import Problem
from kernelopt.kernelbench.completion import FormatError, extract_code
from kernelopt.rewards.functions import make_reward
from kernelopt.rewards.service.answers import format_error_answer, unscorable_answer, verdict_answer
from kernelopt.rewards.service.catalog import ProblemCatalog
from kernelopt.rewards.service.errors import Overloaded, RequestTimedOut, ServiceError, ShuttingDown
from kernelopt.rewards.service.jobs import Job, JobLedger
from kernelopt.rewards.service.lanes import EvaluatorFactory, LanePool, default_evaluator_factory
from kernelopt.rewards.service.metrics import Metrics
from kernelopt.rewards.service.requests import EvalItem, RequestParser, Unscorable
from kernelopt.sandbox.results import EvalOptions


class RewardService:
    """Judges completions and rewards them; the HTTP layer (`RewardServer`) is a thin shell.

    `evaluator_factory(problem, options, jobs)` makes a lane's judge (sandbox/results.Judge;
    default: a local Evaluator); a lane calls its `evaluate_many(sources)` and `close()`. `compile_speedups` maps a
    problem's content hash to torch.compile's cached speedup on it (`kernelopt baselines`),
    which the milestone reward's last step needs."""

    def __init__(self, problems: Iterable[Problem] = (), options: EvalOptions | None = None, *,
                 reward: str = "speedup", jobs: int = 2, queue_size: int = 64, concurrency: int = 1,
                 request_timeout: float = 900.0, cache_size: int = 4,
                 evaluator_factory: EvaluatorFactory | None = None, compile_speedups: dict[str, float] | None = None):
        if queue_size < 1 or jobs < 1 or concurrency < 1 or cache_size < 1 or not request_timeout > 0:
            raise ValueError("queue_size, jobs, concurrency and cache_size must be at least 1, and "
                             "request_timeout positive")
        from kernelopt.sandbox.device import resolve_device

        self.catalog = ProblemCatalog(problems)
        options = options or EvalOptions()
        self.options = options.model_copy(update={"device": resolve_device(options.device)})  # ValueError
        self.default_reward = make_reward(reward)  # RewardError for a bad spec
        self.jobs, self.queue_size, self.concurrency = jobs, queue_size, concurrency
        self.request_timeout, self.cache_size = request_timeout, cache_size
        self.metrics = Metrics()
        self.compile_speedups = dict(compile_speedups or {})
        self._parser = RequestParser(self.catalog, self.default_reward, self.options)
        self._ledger = JobLedger(queue_size, self.metrics)
        self._lanes = LanePool(tracker=self._ledger, evaluator_factory=evaluator_factory or default_evaluator_factory,
                               jobs=jobs, concurrency=concurrency, cache_size=cache_size)

    def parse_evaluate(self, body) -> EvalItem:
        """A POST /v1/evaluate body, validated (BadRequest says what is wrong)."""
        return self._parser.evaluate(body)

    def parse_openrlhf(self, body) -> list[EvalItem | Unscorable]:
        """An OpenRLHF remote reward request, validated: one item per sample (Unscorable for a
        sample that cannot be judged)."""
        return self._parser.openrlhf(body)

    def submit(self, items: Sequence[EvalItem | Unscorable], *, per_sample: bool = False,
               arrived: float | None = None) -> PendingAnswers:
        """Accept the items as one request without waiting for verdicts: completions without a
        program, and unscorable samples, are answered at once, the others are queued in their
        lanes. Raises ServiceError when nothing was accepted (Overloaded, ShuttingDown,
        BadRequest for a batch larger than the queue, RequestTimedOut when reading and parsing
        the request, which count from `arrived` (time.monotonic(); default now), took the whole
        request timeout), except with `per_sample`: then a full queue, a shutdown or an expired
        request makes every sample unscorable, and so does a timeout or a failed evaluation
        later (each sample its own failure, as OpenRLHF needs: it cannot use an error answer)."""
        pending = PendingAnswers(items, self._ledger, self.request_timeout, arrived, per_sample=per_sample,
                                 compile_speedups=self.compile_speedups)
        jobs: list[tuple[int, Job]] = []
        judged: list[tuple[EvalItem, Job]] = []
        for index, item in enumerate(items):
            if isinstance(item, Unscorable):
                self.metrics.verdict("unscorable")
                pending.answers[index] = unscorable_answer(item, item.reason)
                continue
            try:
                job = Job(extract_code(item.completion).code)
                jobs.append((index, job))
                judged.append((item, job))
            except FormatError as exc:
                self.metrics.verdict("format_error")
                pending.answers[index] = format_error_answer(item, str(exc))
        try:
            if jobs and pending.expired():
                raise pending.timed_out()
            self._ledger.admit([job for _, job in jobs])
        except (Overloaded, ShuttingDown, RequestTimedOut) as exc:
            if not per_sample:
                raise
            for index, _ in jobs:
                self.metrics.verdict("unscorable")
                pending.answers[index] = unscorable_answer(items[index], f"not judged: {exc.message}")
            return pending
        pending.jobs = jobs
        try:
            for item, job in judged:
                self._lanes.submit(item.problem, item.options, job)
        except BaseException:
            pending.withdraw()
            raise
        return pending

    def evaluate(self, items: list[EvalItem]) -> list[dict]:
        """Judge the items concurrently and answer each with its verdict and reward, blocking.
        Raises ServiceError for the whole request: Overloaded (nothing was accepted),
        RequestTimedOut, ReferenceFailed, ShuttingDown or a sandbox failure."""
        pending = self.submit(items)
        try:
            return pending.wait()
        finally:
            pending.withdraw()

    def health(self) -> dict:
        waiting, in_flight = self._ledger.counts()
        return {"ok": not self._ledger.closed, "device": self.options.device, "queue_depth": waiting,
                "queue_size": self.queue_size, "in_flight": in_flight, "evaluators": len(self._lanes),
                "problems": len(self.catalog), "reward": self.default_reward.spec}

    def render_metrics(self) -> str:
        waiting, in_flight = self._ledger.counts()
        return self.metrics.render({
            "queue_depth": ("Requests accepted and waiting for an evaluation slot.", waiting),
            "queue_size": ("Most requests that may wait; more are refused with 429.", self.queue_size),
            "in_flight": ("Candidates being evaluated.", in_flight),
            "evaluators": ("Warm evaluators (one per problem and option set).", len(self._lanes)),
        })

    def close(self, timeout: float | None = None) -> None:
        """Refuse new work, let the batches in progress finish (their requests get verdicts),
        answer the waiting ones with 503, and close every Evaluator."""
        self._ledger.close()
        self._lanes.close(timeout)


class PendingAnswers:
    """One accepted request on its way to its answers: those known at once (format errors),
    and a job per program being judged. Wait with `wait()` from a thread or `wait_async()` from
    an event loop, then always `withdraw()`, which takes back what is still queued."""

    def __init__(self, items: Sequence[EvalItem | Unscorable], ledger: JobLedger, timeout: float,
                 arrived: float | None = None, *, per_sample: bool = False,
                 compile_speedups: dict[str, float] | None = None):
        self.items, self.per_sample = items, per_sample
        self._compile_speedups = compile_speedups or {}
        self.answers: list[dict | None] = [None] * len(items)
        self.jobs: list[tuple[int, Job]] = []
        self._ledger, self._timeout = ledger, timeout
        # Reading and parsing the request count, and so does the time in the queue.
        self._deadline = (time.monotonic() if arrived is None else arrived) + timeout

    def wait(self) -> list[dict]:
        for index, job in self.jobs:
            try:
                result = job.future.result(timeout=self._time_left())
            except FutureTimeout:
                self._failed(index, self.timed_out())
                continue
            except ServiceError as exc:
                self._failed(index, exc)
                continue
            self.answers[index] = self._verdict_answer(index, result)
        return self._all_answers()

    async def wait_async(self) -> list[dict]:
        for index, job in self.jobs:
            try:
                # On timeout wait_for cancels the job's future: a no-op once it runs, and for a
                # job still queued the same as withdraw() does.
                result = await asyncio.wait_for(asyncio.wrap_future(job.future), self._time_left())
            except asyncio.TimeoutError:
                self._failed(index, self.timed_out())
                continue
            except ServiceError as exc:
                self._failed(index, exc)
                continue
            self.answers[index] = self._verdict_answer(index, result)
        return self._all_answers()

    def _all_answers(self) -> list[dict]:
        """The answers, once every sample has one (at once, from its job, or as unscorable)."""
        answers = [answer for answer in self.answers if answer is not None]
        if len(answers) != len(self.answers):
            raise RuntimeError("a sample of the request got no answer")  # a bug: each has a job or an answer
        return answers

    def _verdict_answer(self, index: int, result) -> dict:
        item = self.items[index]
        assert isinstance(item, EvalItem), "only judged samples have jobs"
        return verdict_answer(item, result, self._compile_speedups.get(item.problem.content_hash))

    def _failed(self, index: int, error: ServiceError) -> None:
        """A job without a verdict: the request's error, or with per_sample the sample's."""
        if not self.per_sample:
            raise error
        self.answers[index] = unscorable_answer(self.items[index], f"not judged: {error.message}")

    def withdraw(self) -> None:
        for _, job in self.jobs:
            self._ledger.withdraw(job)

    def _time_left(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def expired(self) -> bool:
        return self._time_left() <= 0

    def timed_out(self) -> RequestTimedOut:
        return RequestTimedOut(f"no verdict within the request timeout ({self._timeout:g} s); the service is busy "
                               "or the evaluation is slow: retry, or raise --request-timeout")

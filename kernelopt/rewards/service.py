"""The reward service: the referee behind a JSON HTTP API, for RL trainers (docs/serve.md).

    service = RewardService(problem_set, EvalOptions(device="cuda"), reward="speedup")
    server = start_server(service, "127.0.0.1", 8321)       # serves in a thread; server.url
    ...
    server.stop()                                            # answers what it accepted, then closes

A request names a problem (an id of the loaded set, or a reference source) and a completion
(an LLM's whole answer, or bare code). The program is pulled out of the completion first: an
answer with none gets its `format_error` verdict and reward at once, without touching a worker.
Otherwise the request becomes a job for the problem's *lane*:

- One lane per problem and option set, holding one `Evaluator` (a warm reference worker,
  candidates in flight up to `jobs`). The lane's thread takes every job waiting for it as one
  batch (`evaluate_many`), so concurrent requests for one problem share the warm reference.
- Lanes of different problems run concurrently, up to `concurrency` at once (a global
  semaphore: several problems timing on one GPU at the same moment would disturb each other's
  timings, so the default is one). Idle lanes are kept in a small LRU cache (`cache_size`); an
  evicted lane closes its Evaluator, and so does `close()`.
- Backpressure: at most `queue_size` jobs wait (accepted, not yet evaluating). A request that
  does not fit is refused at once with 429 and Retry-After; a request that is accepted always
  gets an answer: its verdict, or an explicit error (504 past `request_timeout`, 422 when the
  reference itself fails, 500 when the sandbox fails, 503 when the service shuts down).

Everything in this module's top level is standard library or light kernelopt modules; torch is
imported with the Evaluator, in the lane threads.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from pydantic import ValidationError

from kernelopt.kernelbench import Problem, ProblemError, problem_from_source
from kernelopt.kernelbench.completion import FormatError, extract_code
from kernelopt.rewards.functions import Outcome, RewardError, RewardFunction, make_reward
from kernelopt.sandbox.results import EvalOptions, EvalResult

# Options a request may set for itself: how strictly and how long a candidate is judged. What
# decides where and how safely code runs (device, isolation, memory, builds, timeout) and the
# secret seeds stay the operator's.
REQUEST_OPTIONS = ("correctness_trials", "atol", "rtol", "max_rel_error", "precision_policy", "warmup_calls",
                   "min_timed_calls", "max_timed_calls", "target_rel_spread", "target_precision", "timing_budget",
                   "outlier_speedup")
EVALUATE_FIELDS = ("problem", "completion", "reward", "options")
# Special tokens a decoded query may end with (OpenRLHF decodes with skip_special_tokens=False).
_TRAILING_SPECIAL_TOKENS = re.compile(r"(?:\s*(?:<\|[^|<>\s]{1,40}\|>|</s>|<eos>|<end_of_turn>))+\s*\Z")


# -- errors: each one is an HTTP answer --------------------------------------------------------

class ServiceError(Exception):
    """A request that gets an error answer instead of a verdict."""

    status = 500
    kind = "internal_error"

    def __init__(self, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.message, self.retry_after = message, retry_after

    def body(self) -> dict:
        body = {"error": self.message, "code": self.kind}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        return body


class BadRequest(ServiceError):
    status, kind = 400, "bad_request"


class Overloaded(ServiceError):
    status, kind = 429, "overloaded"


class RequestTimedOut(ServiceError):
    status, kind = 504, "timeout"


class ReferenceFailed(ServiceError):
    status, kind = 422, "problem_error"


class ShuttingDown(ServiceError):
    status, kind = 503, "shutting_down"


def as_service_error(exc: BaseException) -> ServiceError:
    """What an exception raised while evaluating means for the requests of that batch."""
    from kernelopt.sandbox.process import SandboxError

    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, ProblemError):
        return ReferenceFailed(f"the reference program failed, so no candidate can be judged: {exc}")
    if isinstance(exc, SandboxError):
        return ServiceError(f"the sandbox failed (see `kernelopt doctor`): {exc}")
    return ServiceError(f"evaluation failed: {type(exc).__name__}: {exc}")


# -- problems ---------------------------------------------------------------------------------

def problem_ids(problem: Problem) -> list[str]:
    """The ids a problem of a loaded set answers to: "level/id" (e.g. "1/3"; the bare id when
    the set has no levels) and its name."""
    ids = []
    if problem.problem_id is not None:
        ids.append(f"{problem.level}/{problem.problem_id}" if problem.level is not None else str(problem.problem_id))
    ids.append(problem.name)
    return ids


class ProblemCatalog:
    """The loaded problem set, by id. A name shared by several problems is ambiguous."""

    def __init__(self, problems: Iterable[Problem] = ()):
        self.problems = list(problems)
        self._by_id: dict[str, Problem | None] = {}
        for problem in self.problems:
            for key in problem_ids(problem):
                self._by_id[key] = None if key in self._by_id and self._by_id[key] is not problem else problem

    def __len__(self) -> int:
        return len(self.problems)

    def get(self, problem_id: str) -> Problem:
        if not self.problems:
            raise BadRequest(f"unknown problem id {problem_id!r}: no problem set is loaded; send the reference "
                             'program as {"source": ...}, or start the service with --kernelbench SET')
        if problem_id not in self._by_id:
            examples = ", ".join(problem_ids(self.problems[0]))
            raise BadRequest(f"unknown problem id {problem_id!r}: the loaded set has {len(self.problems)} problems, "
                             f"named by level/id or by name (e.g. {examples}); GET /v1/problems lists them")
        problem = self._by_id[problem_id]
        if problem is None:
            raise BadRequest(f"problem id {problem_id!r} is ambiguous (several problems have that name): "
                             "use level/id, e.g. 1/3")
        return problem

    def resolve(self, spec) -> Problem:
        """A request's problem: {"id": ...}, {"source": ..., "name": optional}, or a string (a
        label): a reference program when it has a line break, an id otherwise."""
        if isinstance(spec, str):
            spec = {"source": spec} if "\n" in spec else {"id": spec}
        if not isinstance(spec, dict):
            raise BadRequest(f'"problem" must be an object ({{"id": ...}} or {{"source": ...}}) or a string, '
                             f"not {_json_type(spec)}")
        unknown = set(spec) - {"id", "source", "name"}
        if unknown or ("id" in spec) == ("source" in spec):
            raise BadRequest('"problem" needs exactly one of "id" (a problem of the loaded set) or "source" '
                             f'(a reference program){f"; unknown field(s): {sorted(unknown)}" if unknown else ""}')
        if "id" in spec:
            return self.get(_string(spec, "id", "problem.id"))
        source = _string(spec, "source", "problem.source")
        name = _string(spec, "name", "problem.name") if "name" in spec else None
        try:
            return problem_from_source(source, path="<request>", name=name or "inline")
        except ProblemError as exc:
            raise BadRequest(f"problem.source is not a usable reference program: {exc.cause}") from None

    def listing(self) -> list[dict]:
        return [{"ids": problem_ids(p), "name": p.name, "level": p.level, "problem_id": p.problem_id,
                 "hash": p.content_hash} for p in self.problems]


# -- jobs, lanes and the service ----------------------------------------------------------------

@dataclass(frozen=True)
class EvalItem:
    """One completion to judge, validated: what a request body turns into."""

    problem: Problem
    completion: str
    reward: RewardFunction
    options: EvalOptions


@dataclass(eq=False)
class _Job:
    source: str
    future: Future = field(default_factory=Future)
    queued: bool = True  # counted among the waiting; cleared exactly once (see _dequeue)
    started: float = 0.0


EvaluatorFactory = Callable[[Problem, EvalOptions, int], object]


def default_evaluator_factory(problem: Problem, options: EvalOptions, jobs: int):
    from kernelopt.sandbox.batch import Evaluator  # imports torch

    return Evaluator(problem, options, jobs=jobs)


class _Lane:
    """One problem under one option set: its Evaluator, and the jobs waiting for it. Only the
    lane's own thread touches the Evaluator."""

    def __init__(self, problem: Problem, options: EvalOptions, service: RewardService):
        self.problem, self.options, self._service = problem, options, service
        self._cond = threading.Condition()
        self._pending: deque[_Job] = deque()
        self._busy = False
        self._closing = False
        self._evaluator = None
        self._thread = threading.Thread(target=self._run, name=f"kernelopt-lane-{problem.short_hash}", daemon=True)
        self._thread.start()

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._pending and not self._busy

    def submit(self, job: _Job) -> None:
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
            while True:
                batch = self._next_batch()
                if batch is None:
                    break
                if batch:
                    self._evaluate(batch)
                    self._service._evict_idle_lanes()  # this lane may be idle now, and beyond the cache
        finally:
            with self._cond:
                left, self._pending = list(self._pending), deque()
            for job in left:
                self._service._fail(job, ShuttingDown("the service shut down before this request was evaluated"))
            self._discard_evaluator()

    def _next_batch(self) -> list[_Job] | None:
        """Every job waiting, once this lane holds one of the service's evaluation slots
        (None: closing). Jobs whose requests gave up meanwhile are dropped."""
        with self._cond:
            while not self._pending and not self._closing:
                self._cond.wait()
            if self._closing:
                return None
        while not self._service._slots.acquire(timeout=0.2):
            if self._closing:
                return None
        with self._cond:
            taken, self._pending = list(self._pending), deque()
            batch = [job for job in taken if self._service._start(job)]
            self._busy = bool(batch)
        if not batch:
            self._service._slots.release()
        return batch

    def _evaluate(self, batch: list[_Job]) -> None:
        try:
            if self._evaluator is None:
                self._evaluator = self._service._evaluator_factory(self.problem, self.options, self._service.jobs)
            for index, result in self._evaluator.evaluate_many([job.source for job in batch]):
                self._service._finish(batch[index], result)
        except BaseException as exc:  # every accepted job gets an answer, whatever went wrong
            error = as_service_error(exc)
            for job in batch:
                if not job.future.done():
                    self._service._fail(job, error)
            self._discard_evaluator()  # its state after a failure is unknown: the next batch starts afresh
            if not isinstance(exc, Exception):
                raise
        finally:
            with self._cond:
                self._busy = False
            self._service._slots.release()

    def _discard_evaluator(self) -> None:
        evaluator, self._evaluator = self._evaluator, None
        if evaluator is not None:
            try:
                evaluator.close()
            except Exception as exc:  # closing is best effort; the workers die with the service anyway
                print(f"kernelopt serve: closing an evaluator failed: {exc}", file=sys.stderr)


class Metrics:
    """Counters and sums behind GET /metrics (Prometheus text format)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (path, code) -> count
        self.verdicts: Counter = Counter()  # status -> count
        self.evaluation_seconds_sum = 0.0
        self.evaluation_count = 0

    def request(self, path: str, code: int) -> None:
        with self._lock:
            self.requests[(path, code)] += 1

    def verdict(self, status: str, seconds: float | None = None) -> None:
        with self._lock:
            self.verdicts[status] += 1
            if seconds is not None:
                self.evaluation_seconds_sum += seconds
                self.evaluation_count += 1

    def mean_evaluation_seconds(self) -> float | None:
        with self._lock:
            return self.evaluation_seconds_sum / self.evaluation_count if self.evaluation_count else None

    def render(self, gauges: dict[str, tuple[str, float]]) -> str:
        with self._lock:
            lines = ["# HELP kernelopt_requests_total HTTP requests answered, by path and status code.",
                     "# TYPE kernelopt_requests_total counter"]
            lines += [f'kernelopt_requests_total{{path="{path}",code="{code}"}} {count}'
                      for (path, code), count in sorted(self.requests.items())]
            lines += ["# HELP kernelopt_verdicts_total Verdicts reached, by status (format_error included).",
                      "# TYPE kernelopt_verdicts_total counter"]
            lines += [f'kernelopt_verdicts_total{{status="{status}"}} {count}'
                      for status, count in sorted(self.verdicts.items())]
            lines += ["# HELP kernelopt_evaluation_seconds Seconds of evaluation per candidate, to its verdict.",
                      "# TYPE kernelopt_evaluation_seconds summary",
                      f"kernelopt_evaluation_seconds_sum {self.evaluation_seconds_sum:.6f}",
                      f"kernelopt_evaluation_seconds_count {self.evaluation_count}"]
        for name, (help_text, value) in gauges.items():
            lines += [f"# HELP kernelopt_{name} {help_text}", f"# TYPE kernelopt_{name} gauge",
                      f"kernelopt_{name} {value:g}"]
        return "\n".join(lines) + "\n"


class RewardService:
    """Judges completions and rewards them; the HTTP layer (`RewardServer`) is a thin shell.

    `evaluator_factory(problem, options, jobs)` makes a lane's Evaluator (default: the real
    one); it must have `evaluate_many(sources)` and `close()`."""

    def __init__(self, problems: Iterable[Problem] = (), options: EvalOptions | None = None, *,
                 reward: str = "speedup", jobs: int = 2, queue_size: int = 64, concurrency: int = 1,
                 request_timeout: float = 900.0, cache_size: int = 4,
                 evaluator_factory: EvaluatorFactory | None = None):
        if queue_size < 1 or jobs < 1 or concurrency < 1 or cache_size < 1 or not request_timeout > 0:
            raise ValueError("queue_size, jobs, concurrency and cache_size must be at least 1, and "
                             "request_timeout positive")
        from kernelopt.sandbox.referee import resolve_device  # imports torch; the lanes need it anyway

        self.catalog = ProblemCatalog(problems)
        options = options or EvalOptions()
        self.options = options.model_copy(update={"device": resolve_device(options.device)})  # ValueError
        self.default_reward = make_reward(reward)  # RewardError for a bad spec
        self.jobs, self.queue_size, self.concurrency = jobs, queue_size, concurrency
        self.request_timeout, self.cache_size = request_timeout, cache_size
        self.metrics = Metrics()
        self._evaluator_factory = evaluator_factory or default_evaluator_factory
        self._slots = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()  # the lanes
        self._lanes: OrderedDict[tuple, _Lane] = OrderedDict()
        self._counts = threading.Lock()  # waiting / in flight
        self._waiting = 0
        self._in_flight = 0
        self._closed = False

    # -- the public operations -----------------------------------------------------------------

    def parse_evaluate(self, body) -> EvalItem:
        """A POST /v1/evaluate body, validated (BadRequest says what is wrong)."""
        if not isinstance(body, dict):
            raise BadRequest(f"the body must be a JSON object, not {_json_type(body)}")
        unknown = sorted(set(body) - set(EVALUATE_FIELDS))
        if unknown:
            raise BadRequest(f"unknown field(s) {unknown}: the fields are {', '.join(EVALUATE_FIELDS)}")
        for name in ("problem", "completion"):
            if name not in body:
                raise BadRequest(f'missing field "{name}" (required: problem, completion)')
        return EvalItem(self.catalog.resolve(body["problem"]), _string(body, "completion", "completion"),
                        self._reward(body.get("reward")), self._options(body.get("options")))

    def parse_openrlhf(self, body) -> list[EvalItem]:
        """An OpenRLHF remote reward request: {"query": [...], "prompts": [...], "labels": [...]}.
        Each label names the problem (as a "problem" string does); the completion is the query
        after its prompt."""
        if not isinstance(body, dict):
            raise BadRequest(f"the body must be a JSON object, not {_json_type(body)}")
        lists = {}
        for name in ("query", "labels"):
            lists[name] = _string_list(body, name, required=True)
        lists["prompts"] = _string_list(body, "prompts", required=False) or [""] * len(lists["query"])
        if not len(lists["query"]) == len(lists["labels"]) == len(lists["prompts"]):
            raise BadRequest(f'"query", "prompts" and "labels" must have one entry per sample (got '
                             f"{len(lists['query'])}, {len(lists['prompts'])} and {len(lists['labels'])})")
        reward, options = self._reward(body.get("reward")), self._options(body.get("options"))
        items = []
        for index, (query, prompt, label) in enumerate(zip(lists["query"], lists["prompts"], lists["labels"])):
            try:
                problem = self.catalog.resolve(label)
            except BadRequest as exc:
                raise BadRequest(f"labels[{index}]: {exc.message}") from None
            items.append(EvalItem(problem, response_part(query, prompt), reward, options))
        return items

    def evaluate(self, items: list[EvalItem]) -> list[dict]:
        """Judge the items concurrently and answer each with its verdict and reward. Raises
        ServiceError for the whole request: Overloaded (nothing was accepted), RequestTimedOut,
        ReferenceFailed, ShuttingDown or a sandbox failure."""
        deadline = time.monotonic() + self.request_timeout
        answers: list[dict | None] = [None] * len(items)
        jobs: list[tuple[int, _Job]] = []
        for index, item in enumerate(items):
            try:
                extracted = extract_code(item.completion)
            except FormatError as exc:
                answers[index] = self._format_error_answer(item, str(exc))
                continue
            jobs.append((index, _Job(extracted.code)))
        self._admit([job for _, job in jobs])
        try:
            for index, job in jobs:
                self._submit(items[index], job)
            for index, job in jobs:
                result = self._wait(job, deadline)
                answers[index] = self._answer(items[index], result)
        finally:
            for _, job in jobs:
                self._give_up(job)
        return answers

    def health(self) -> dict:
        with self._counts:
            waiting, in_flight = self._waiting, self._in_flight
        return {"ok": not self._closed, "device": self.options.device, "queue_depth": waiting, "queue_size": self.queue_size,
                "in_flight": in_flight, "evaluators": len(self._lanes), "problems": len(self.catalog),
                "reward": self.default_reward.spec}

    def render_metrics(self) -> str:
        with self._counts:
            waiting, in_flight = self._waiting, self._in_flight
        return self.metrics.render({
            "queue_depth": ("Requests accepted and waiting for an evaluation slot.", waiting),
            "queue_size": ("Most requests that may wait; more are refused with 429.", self.queue_size),
            "in_flight": ("Candidates being evaluated.", in_flight),
            "evaluators": ("Warm evaluators (one per problem and option set).", len(self._lanes)),
        })

    def close(self, timeout: float | None = None) -> None:
        """Refuse new work, let the batches in progress finish (their requests get verdicts),
        answer the waiting ones with 503, and close every Evaluator."""
        with self._lock:
            self._closed = True
            lanes = list(self._lanes.values())
            self._lanes.clear()
            for lane in lanes:
                lane.close()
        for lane in lanes:
            lane.join(timeout)

    # -- parsing helpers -------------------------------------------------------------------------

    def _reward(self, spec) -> RewardFunction:
        if spec is None:
            return self.default_reward
        if not isinstance(spec, str):
            raise BadRequest(f'"reward" must be a spec string such as "speedup" or "cuda_l1:k=3", not {_json_type(spec)}')
        try:
            return _cached_reward(spec)
        except RewardError as exc:
            raise BadRequest(f"reward: {exc}") from None

    def _options(self, overrides) -> EvalOptions:
        if overrides is None:
            return self.options
        if not isinstance(overrides, dict):
            raise BadRequest(f'"options" must be an object, not {_json_type(overrides)}')
        refused = sorted(set(overrides) - set(REQUEST_OPTIONS))
        if refused:
            raise BadRequest(f"options {refused} cannot be set per request (the operator sets them with "
                             f"`kernelopt serve`); per-request options: {', '.join(REQUEST_OPTIONS)}")
        try:
            return EvalOptions(**{**self.options.model_dump(), **overrides})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise BadRequest(f"options: {problems}") from None

    # -- the queue -------------------------------------------------------------------------------

    def _admit(self, jobs: list[_Job]) -> None:
        """Count the jobs as waiting, all or none: refuse when they do not fit."""
        with self._counts:
            if self._closed:
                raise ShuttingDown("the service is shutting down", retry_after=5)
            if len(jobs) > self.queue_size:
                raise BadRequest(f"{len(jobs)} completions in one request, more than the queue holds "
                                 f"({self.queue_size}): split the batch or raise --queue-size")
            if self._waiting + len(jobs) > self.queue_size:
                raise Overloaded(f"the queue is full ({self._waiting} requests waiting, at most {self.queue_size}); "
                                 "retry later", retry_after=self._retry_after())
            self._waiting += len(jobs)

    def _retry_after(self) -> int:
        mean = self.metrics.mean_evaluation_seconds() or 1.0
        return max(1, min(60, math.ceil(mean)))

    def _submit(self, item: EvalItem, job: _Job) -> None:
        key = (item.problem.content_hash, item.problem.name, item.options.model_dump_json())
        with self._lock:
            if self._closed:
                raise ShuttingDown("the service is shutting down", retry_after=5)
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = _Lane(item.problem, item.options, self)
            self._lanes.move_to_end(key)
            lane.submit(job)  # under the lock: an idle lane cannot be evicted between lookup and submit
        self._evict_idle_lanes()

    def _evict_idle_lanes(self) -> None:
        """Beyond cache_size, close the least recently used lanes that have nothing to do. Busy
        lanes stay (the cache exceeds its size while more problems than that are busy, and
        shrinks back as their batches end)."""
        with self._lock:
            excess = len(self._lanes) - self.cache_size
            for key in list(self._lanes):
                if excess <= 0:
                    break
                if self._lanes[key].idle:
                    self._lanes.pop(key).close()
                    excess -= 1

    def _dequeue(self, job: _Job) -> None:
        with self._counts:
            if job.queued:
                job.queued = False
                self._waiting -= 1

    def _start(self, job: _Job) -> bool:
        """A lane takes the job (False: its request gave up already)."""
        if not job.future.set_running_or_notify_cancel():
            return False
        self._dequeue(job)
        with self._counts:
            self._in_flight += 1
        job.started = time.monotonic()
        return True

    def _finish(self, job: _Job, result: EvalResult) -> None:
        seconds = result.durations.get("total") if result.durations else None
        self.metrics.verdict(result.status, seconds if seconds is not None else time.monotonic() - job.started)
        self._end(job)
        job.future.set_result(result)

    def _fail(self, job: _Job, error: ServiceError) -> None:
        if job.future.done():
            return
        if job.future.running():
            self._end(job)
        else:
            if not job.future.set_running_or_notify_cancel():
                return
            self._dequeue(job)
        job.future.set_exception(error)

    def _end(self, job: _Job) -> None:
        with self._counts:
            self._in_flight -= 1

    def _wait(self, job: _Job, deadline: float) -> EvalResult:
        try:
            return job.future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            raise RequestTimedOut(f"no verdict within the request timeout ({self.request_timeout:g} s); the "
                                  "service is busy or the evaluation is slow: retry, or raise --request-timeout"
                                  ) from None

    def _give_up(self, job: _Job) -> None:
        """The request is answered (or failed): a job still waiting is withdrawn from its lane."""
        if job.future.cancel():  # still waiting in its lane, or never submitted
            self._dequeue(job)

    # -- answers ---------------------------------------------------------------------------------

    def _answer(self, item: EvalItem, result: EvalResult) -> dict:
        answer = json.loads(result.model_dump_json())
        answer.update(reward=item.reward(Outcome.from_result(result)), reward_spec=item.reward.spec)
        return answer

    def _format_error_answer(self, item: EvalItem, message: str) -> dict:
        self.metrics.verdict("format_error")
        answer = json.loads(EvalResult(status="incorrect", correct=False).model_dump_json())
        answer.update(status="format_error", message=message, problem_name=item.problem.name,
                      problem_hash=item.problem.content_hash,
                      reward=item.reward(Outcome.format_error()), reward_spec=item.reward.spec)
        return answer


_REWARD_CACHE: dict[str, RewardFunction] = {}


def _cached_reward(spec: str) -> RewardFunction:
    if spec not in _REWARD_CACHE:
        _REWARD_CACHE[spec] = make_reward(spec)
    return _REWARD_CACHE[spec]


def response_part(query: str, prompt: str) -> str:
    """The model's answer in an OpenRLHF query (prompt + response, decoded with special tokens):
    the text after the prompt when the prompt is found in it, else the whole query (the program
    is then the last block defining ModelNew, which is the answer's), without trailing special
    tokens."""
    if prompt:
        at = query.find(prompt)
        if at >= 0:
            query = query[at + len(prompt):]
    return _TRAILING_SPECIAL_TOKENS.sub("", query)


def openrlhf_answer(answers: list[dict]) -> dict:
    """What OpenRLHF reads: "rewards" (the advantage's reward), "scores" (0/1 correctness, for
    dynamic filtering) and "extra_logs" (numbers logged per sample); plus each verdict's status."""
    correct = [1.0 if a["correct"] else 0.0 for a in answers]
    return {"rewards": [a["reward"] for a in answers], "scores": correct,
            "extra_logs": {"kernelopt_correct": correct,
                           "kernelopt_speedup": [a["speedup"] if a["speedup"] is not None else 0.0 for a in answers]},
            "statuses": [a["status"] for a in answers]}


def _json_type(value) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _string(body: dict, key: str, label: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise BadRequest(f'"{label}" must be a string, not {_json_type(value)}')
    return value


def _string_list(body: dict, key: str, required: bool) -> list[str] | None:
    if key not in body:
        if required:
            raise BadRequest(f'missing field "{key}" (an OpenRLHF request has "query", "prompts" and "labels")')
        return None
    value = body[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f'"{key}" must be an array of strings')
    return value


# -- HTTP ---------------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    """Routes, body limits and JSON; all decisions are the service's."""

    server: RewardServer
    protocol_version = "HTTP/1.1"
    server_version = "kernelopt-reward"
    timeout = 120  # seconds a connection may stall while sending; an idle kept-alive one is then closed

    ROUTES: ClassVar[dict[str, str]] = {"/v1/evaluate": "POST", "/v1/openrlhf": "POST", "/get_reward": "POST", "/healthz": "GET",
                                        "/metrics": "GET", "/v1/problems": "GET"}

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("PUT")

    def do_DELETE(self):
        self._route("DELETE")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        self._metric_path = path if path in self.ROUTES else "other"
        self.server.track(+1)
        try:
            if path not in self.ROUTES:
                raise _NotFound(f"no endpoint {path}: the endpoints are "
                                + ", ".join(f"{m} {p}" for p, m in self.ROUTES.items()))
            if method != self.ROUTES[path]:
                raise _MethodNotAllowed(f"{path} takes {self.ROUTES[path]}, not {method}")
            self._dispatch(path)
        except ServiceError as exc:
            self.close_connection = True  # a body left unread must not be taken for the next request
            self._send_json(exc.status, exc.body(), retry_after=exc.retry_after)
        except Exception as exc:  # noqa: BLE001 - the client gets an answer, not a dropped connection
            self.close_connection = True
            self._send_json(500, ServiceError(f"internal error: {type(exc).__name__}: {exc}").body())
        finally:
            self.server.track(-1)

    def _dispatch(self, path: str) -> None:
        service = self.server.service
        if path == "/healthz":
            self._send_json(200, service.health())
        elif path == "/metrics":
            self._send(200, service.render_metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/problems":
            self._send_json(200, {"problems": service.catalog.listing()})
        elif path == "/v1/evaluate":
            item = service.parse_evaluate(self._read_json())
            self._send_json(200, service.evaluate([item])[0])
        else:  # the OpenRLHF remote reward endpoint
            items = service.parse_openrlhf(self._read_json())
            self._send_json(200, openrlhf_answer(service.evaluate(items)))

    def _read_json(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise BadRequest("chunked bodies are not accepted: send Content-Length")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if length < 0:
            raise BadRequest("missing or invalid Content-Length header")
        if length > self.server.max_body:
            raise BadRequest(f"the body is too large ({length} bytes; at most {self.server.max_body}, "
                             "see --max-body)")
        raw = self.rfile.read(length)
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise BadRequest(f"the body is not valid JSON: {exc or 'nested too deeply'}") from None

    def _send_json(self, code: int, body: dict, retry_after: int | None = None) -> None:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        self._send(code, json.dumps(body).encode(), "application/json", headers)

    def _send(self, code: int, payload: bytes, content_type: str, headers: dict | None = None) -> None:
        self.server.service.metrics.request(getattr(self, "_metric_path", "other"), code)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format, *args):  # the base class's signature
        if self.server.log_requests:
            super().log_message(format, *args)


class _NotFound(ServiceError):
    status, kind = 404, "not_found"


class _MethodNotAllowed(ServiceError):
    status, kind = 405, "method_not_allowed"


class RewardServer(ThreadingHTTPServer):
    """The HTTP server around a RewardService: a thread per connection."""

    daemon_threads = True

    def __init__(self, service: RewardService, host: str = "127.0.0.1", port: int = 0, *,
                 max_body: int = 16 << 20, log_requests: bool = False):
        self.service, self.max_body, self.log_requests = service, max_body, log_requests
        self._active = 0
        self._active_lock = threading.Condition()
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def track(self, delta: int) -> None:
        with self._active_lock:
            self._active += delta
            self._active_lock.notify_all()

    def start(self) -> RewardServer:
        """Serve from a background thread."""
        self._thread = threading.Thread(target=self.serve_forever, args=(0.1,), name="kernelopt-reward-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop accepting, finish the evaluations in progress (waiting up to `timeout` s for
        each problem's; None: as long as they take) and answer every accepted request, then
        close the Evaluators and the socket. Call it from a thread other than serve_forever's."""
        self.shutdown()  # the serve_forever loop ends; handler threads go on
        self.service.close(timeout)
        end = time.monotonic() + 10.0  # what is left is writing the answers
        with self._active_lock:
            while self._active and time.monotonic() < end:
                self._active_lock.wait(0.1)
        self.server_close()


def start_server(service: RewardService, host: str = "127.0.0.1", port: int = 0, **kwargs) -> RewardServer:
    """A RewardServer serving in a background thread; port 0 picks a free port (see .url)."""
    return RewardServer(service, host, port, **kwargs).start()

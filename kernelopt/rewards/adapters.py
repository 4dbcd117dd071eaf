"""Reward functions for RL trainers, computed by a running reward service (`kernelopt serve`,
docs/serve.md), so the trainer's process never runs a candidate nor holds a GPU for judging.

The service's URL comes from the `url` argument or the environment variable
KERNELOPT_REWARD_URL (read at each call, so it can be set after import). A problem is named by
a string, as in the service's API: a reference program (any text with a line break) or an id of
the service's loaded set (e.g. "1/3" or a problem name); a dict {"id": ...} or {"source": ...}
is passed through.

- verl: `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`, its
  custom reward function (verl 0.9: `reward.custom_reward_function.path` = this file; 0.6:
  `custom_reward_function.path`; the name is verl's default). `ground_truth` names the problem.
  Returns a dict with "score" and "acc" (correctness) plus the verdict, which verl logs; with
  `details=False` the reward alone. `compute_score_async` is the same for verl's async reward loop.
- TRL: `TRLReward` / `TRLRewardAsync` (picklable; `make_trl_reward(...)` builds one) are
  GRPOTrainer reward functions `(prompts, completions, **columns) -> list[float | None]`; the
  problem comes from a dataset column ("problem" by default, else "ground_truth").
  `trl_reward` and `trl_reward_async` are ready-made.
- OpenRLHF: `reward_func(queries, prompts, labels)` (this file works as --remote_rm_url
  directly); it sends the batch to the service's OpenRLHF endpoint and returns OpenRLHF's dict
  of tensors. OpenRLHF can also call that endpoint itself (--remote_rm_url URL/v1/openrlhf).

Only the response is judged: verl and TRL hand over the response alone; for OpenRLHF the
service takes what follows the prompt in the query, and a sample whose query does not start
with its prompt (a prompt truncated from the left) is unscorable, never judged on prompt text.

Failures: a candidate that fails (no program, compile error, wrong, slow, caught cheating) gets
its reward from the service; that is the training signal. A sample the service cannot judge (an
unknown problem, a missing column, a timeout, a full queue, the service unreachable) is
*unscorable*: None for TRL, which skips it; `failure_reward` for verl and OpenRLHF, which cannot;
each with a `RewardWarning`, never an exception that stops the step. Overloaded answers
(429/503) are retried after the Retry-After the service sends, for up to `retry_for` seconds.
`RewardClient` itself raises `RewardServiceError`.

Standard library only (urllib, threads, asyncio); torch only for OpenRLHF's tensors.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

URL_ENV = "KERNELOPT_REWARD_URL"
TOKEN_ENV = "KERNELOPT_SERVE_TOKEN"  # the service's bearer token, when it was started with one
PROBLEM_COLUMNS = ("problem", "ground_truth")  # TRL dataset columns looked up, in this order
_RETRIED_CODES = (429, 503)


class RewardServiceError(RuntimeError):
    """The reward service could not give a verdict; the message says why and what to do."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RewardClient:
    """A small JSON client of the reward service, safe to share between threads."""

    def __init__(self, url: str | None = None, *, timeout: float = 1800.0, retry_for: float = 600.0,
                 max_concurrency: int = 32):
        self._url = url
        self.timeout, self.retry_for, self.max_concurrency = timeout, retry_for, max(1, max_concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @property
    def url(self) -> str:
        url = self._url or os.environ.get(URL_ENV)
        if not url:
            raise RewardServiceError(f"no reward service URL: pass url=... or set {URL_ENV}=http://HOST:PORT "
                                     "(start a service with `kernelopt serve`)")
        return url.rstrip("/")

    def evaluate(self, problem, completion: str, reward: str | None = None, options: dict | None = None) -> dict:
        """The service's answer for one completion: the verdict's fields plus "reward"."""
        if isinstance(problem, Mapping):
            problem = dict(problem)  # a {"id": ...} ground truth read back from parquet, or a DictConfig
        body = {"problem": problem, "completion": completion}
        if reward is not None:
            body["reward"] = reward
        if options:
            body["options"] = dict(options)  # verl hands over its config's mappings (DictConfig)
        return self.post("/v1/evaluate", body)

    def evaluate_many(self, problems: Sequence, completions: Sequence[str], reward: str | None = None,
                      options: dict | None = None) -> list[dict]:
        """Answers for several completions, requested concurrently (up to max_concurrency), in order."""
        _check_lengths(problems, completions)
        futures = [self.pool.submit(self.evaluate, p, c, reward, options) for p, c in zip(problems, completions)]
        return [future.result() for future in futures]

    def evaluate_each(self, problems: Sequence, completions: Sequence[str], reward: str | None = None,
                      options: dict | None = None) -> list[dict | RewardServiceError]:
        """`evaluate_many`, where a sample that gets no answer has its RewardServiceError in its
        place instead of failing the others."""
        _check_lengths(problems, completions)
        futures = [self.pool.submit(self.evaluate, p, c, reward, options) for p, c in zip(problems, completions)]
        return [_answer_or_error(future.result) for future in futures]

    async def evaluate_each_async(self, problems: Sequence, completions: Sequence[str], reward: str | None = None,
                                  options: dict | None = None) -> list[dict | RewardServiceError]:
        _check_lengths(problems, completions)
        results = await asyncio.gather(*(self.evaluate_async(p, c, reward, options)
                                         for p, c in zip(problems, completions)), return_exceptions=True)
        answers: list[dict | RewardServiceError] = []
        for result in results:
            if isinstance(result, RewardServiceError) or not isinstance(result, BaseException):
                answers.append(result)
            else:
                raise result
        return answers

    async def evaluate_async(self, problem, completion: str, reward: str | None = None,
                             options: dict | None = None) -> dict:
        """`evaluate` for an event loop: the request runs in the client's threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self.evaluate, problem, completion, reward, options)

    async def evaluate_many_async(self, problems: Sequence, completions: Sequence[str], reward: str | None = None,
                                  options: dict | None = None) -> list[dict]:
        _check_lengths(problems, completions)
        return list(await asyncio.gather(*(self.evaluate_async(p, c, reward, options)
                                           for p, c in zip(problems, completions))))

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The threads requests wait in: each request blocks one until its verdict, so there
        are as many as requests that may be outstanding (the service batches them)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="kernelopt-reward")
            return self._pool

    def post(self, path: str, body: dict) -> dict:
        """POST JSON and return the JSON answer; retries 429/503 as the service asks."""
        url, data = self.url + path, json.dumps(body).encode()
        give_up_at = time.monotonic() + self.retry_for
        while True:
            request = urllib.request.Request(url, data=data, headers=_headers())
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                message, wait = _error_message(exc), _retry_after(exc)
                if exc.code in _RETRIED_CODES and time.monotonic() + wait < give_up_at:
                    time.sleep(wait)
                    continue
                raise RewardServiceError(f"the reward service at {url} answered {exc.code}: {message}",
                                         exc.code) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise RewardServiceError(f"cannot reach the reward service at {url}: {reason} (is `kernelopt "
                                         f"serve` running there? set the URL with url=... or {URL_ENV})") from None
            except json.JSONDecodeError as exc:
                raise RewardServiceError(f"the reward service at {url} answered something that is not JSON: "
                                         f"{exc}") from None


def _answer_or_error(result) -> dict | RewardServiceError:
    try:
        return result()
    except RewardServiceError as exc:
        return exc


def _headers() -> dict:
    """JSON, and the service's token when $KERNELOPT_SERVE_TOKEN holds one (docs/serve.md)."""
    token = os.environ.get(TOKEN_ENV)
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}


def _check_lengths(problems: Sequence, completions: Sequence) -> None:
    if len(problems) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(problems)} problems")


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
        return str(body.get("error", body))
    except (ValueError, OSError):
        return exc.reason or "no message"


def _retry_after(exc: urllib.error.HTTPError) -> float:
    try:
        return max(0.1, float(exc.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0


_clients: dict[str | None, RewardClient] = {}  # one per URL: their threads are shared


def client_for(url: str | None = None) -> RewardClient:
    """One shared client per URL (None: the environment's, resolved at each call)."""
    client = _clients.get(url)
    return client if client is not None else _clients.setdefault(url, RewardClient(url))


# -- verl -----------------------------------------------------------------------------------------

def compute_score(data_source, solution_str: str, ground_truth, extra_info=None, *, url: str | None = None,
                  reward: str | None = None, options: dict | None = None, details: bool = True,
                  failure_reward: float = 0.0, **_):
    """verl's custom reward function: the reward of `solution_str` for the problem `ground_truth`
    names. verl decodes the response tokens alone (the prompt's are cut at the token boundary),
    so no prompt text reaches the referee. `data_source` and `extra_info` are not needed.

    With details (the default), a dict verl logs key by key: "score" (the reward), "acc"
    (1.0 when correct: verl's accuracy metric, never the speedup), "speedup" (0.0 unless
    correct), "interval" (the interval's relative half-width, 0.0 when none), "flagged",
    "unscorable" (1.0 when no verdict) and "status". A sample the service could not judge
    (unknown problem, timeout, full queue) gets `failure_reward`, with a warning: verl has no
    way to skip one sample."""
    try:
        answer = client_for(url).evaluate(ground_truth, solution_str, reward, options)
    except RewardServiceError as exc:
        return _verl_result(_unscorable(exc, failure_reward), details)
    return _verl_result(answer, details)


async def compute_score_async(data_source, solution_str: str, ground_truth, extra_info=None, *,
                              url: str | None = None, reward: str | None = None, options: dict | None = None,
                              details: bool = True, failure_reward: float = 0.0, **_):
    """`compute_score` as a coroutine (verl's reward loop awaits coroutine reward functions)."""
    try:
        answer = await client_for(url).evaluate_async(ground_truth, solution_str, reward, options)
    except RewardServiceError as exc:
        return _verl_result(_unscorable(exc, failure_reward), details)
    return _verl_result(answer, details)


def _verl_result(answer: dict, details: bool):
    if not details:
        return float(answer["reward"])
    correct = 1.0 if answer["correct"] else 0.0
    return {"score": float(answer["reward"]), "acc": correct, "correct": correct,
            "speedup": float(answer["speedup"] or 0.0), "interval": _half_width(answer),
            "flagged": 1.0 if answer.get("flags") else 0.0,
            "unscorable": 1.0 if answer["status"] == "unscorable" else 0.0, "status": answer["status"]}


def _half_width(answer: dict) -> float:
    interval, speedup = answer.get("speedup_interval"), answer.get("speedup")
    return (interval[1] - speedup) / speedup if interval and speedup else 0.0


def _unscorable(error: RewardServiceError, failure_reward: float | None) -> dict:
    """A made-up answer for a sample the service did not judge, logged as a warning."""
    warnings.warn(f"kernelopt: a sample is unscorable, rewarded {failure_reward}: {error}", RewardWarning,
                  stacklevel=3)
    return {"reward": failure_reward, "correct": False, "speedup": None, "status": "unscorable", "flags": [],
            "speedup_interval": None, "message": str(error)}


class RewardWarning(UserWarning):
    """A sample got no verdict; the trainer's step goes on without it (or with the failure reward)."""


# -- TRL ------------------------------------------------------------------------------------------

def completion_text(completion) -> str:
    """A TRL completion as text: a string as is; a conversational one (a list of messages) as
    the text of its assistant messages, in order (the program is the last one defining ModelNew).
    TRL passes the completion alone (the tokens after the prompt's), never the prompt."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    texts = []
    for message in completion:
        if isinstance(message, dict) and message.get("role") == "assistant":
            texts.append(_content_text(message.get("content")))
    return "\n\n".join(texts)


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def problems_from_columns(columns: dict, count: int, column: str | None = None) -> list:
    """The problem of each completion, from TRL's per-sample dataset columns."""
    names = (column,) if column else PROBLEM_COLUMNS
    for name in names:
        if name in columns and columns[name] is not None:
            values = list(columns[name])
            if len(values) != count:
                raise RewardServiceError(f"column {name!r} has {len(values)} values for {count} completions")
            return values
    raise RewardServiceError(f"no problem column: the dataset needs a column {' or '.join(map(repr, names))} "
                             "holding each prompt's reference program or problem id (or pass column=...)")


class TRLReward:
    """A GRPOTrainer reward function `(prompts, completions, **columns) -> list[float | None]`,
    as a picklable object (TRL's asynchronous GRPO pickles its reward functions; a closure
    cannot be pickled). Requests of a batch are sent concurrently. A sample that cannot be
    judged (unknown problem, missing column, timeout, full queue) gets None, which TRL skips
    for that sample, with a warning; the step goes on. TRL logs the rewards under `name`."""

    def __init__(self, url: str | None = None, *, column: str | None = None, reward: str | None = None,
                 options: dict | None = None, name: str = "kernelopt_reward"):
        self.url, self.column, self.reward, self.options = url, column, reward, dict(options or {}) or None
        self.__name__ = name

    def __call__(self, prompts, completions, **columns) -> list[float | None]:
        problems = self._problems(columns, len(completions))
        if problems is None:
            return [None] * len(completions)
        answers = client_for(self.url).evaluate_each(problems, [completion_text(c) for c in completions],
                                                     self.reward, self.options)
        return self._rewards(columns, answers)

    def _problems(self, columns: dict, count: int) -> list | None:
        try:
            return problems_from_columns(columns, count, self.column)
        except RewardServiceError as exc:
            warnings.warn(f"kernelopt: {count} samples are unscorable: {exc}", RewardWarning, stacklevel=3)
            return None

    def _rewards(self, columns: dict, answers: list) -> list[float | None]:
        answers = [_unscorable(a, None) if isinstance(a, RewardServiceError) else a for a in answers]
        _log_to_trl(columns, answers)
        return [None if a["status"] == "unscorable" else float(a["reward"]) for a in answers]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r}, reward={self.reward!r}, name={self.__name__!r})"


class TRLRewardAsync(TRLReward):
    """The same with an async __call__: TRL runs async reward functions concurrently with the
    others on its event loop. Marked for the checks older TRLs make (asyncio's and inspect's
    iscoroutinefunction look at the object, not at its __call__)."""

    _is_coroutine = getattr(asyncio.coroutines, "_is_coroutine", None)
    _is_coroutine_marker = getattr(inspect, "_is_coroutine_mark", None)

    # An async __call__ is the point of this class (TRL awaits it), so it overrides the sync one on purpose.
    async def __call__(self, prompts, completions, **columns) -> list[float | None]:  # type: ignore[override]
        problems = self._problems(columns, len(completions))
        if problems is None:
            return [None] * len(completions)
        answers = await client_for(self.url).evaluate_each_async(
            problems, [completion_text(c) for c in completions], self.reward, self.options)
        return self._rewards(columns, answers)


def make_trl_reward(url: str | None = None, *, column: str | None = None, reward: str | None = None,
                    options: dict | None = None, name: str = "kernelopt_reward") -> TRLReward:
    """A GRPOTrainer reward function (a `TRLReward`)."""
    return TRLReward(url, column=column, reward=reward, options=options, name=name)


def make_trl_reward_async(url: str | None = None, *, column: str | None = None, reward: str | None = None,
                          options: dict | None = None, name: str = "kernelopt_reward") -> TRLRewardAsync:
    """An async GRPOTrainer reward function (a `TRLRewardAsync`)."""
    return TRLRewardAsync(url, column=column, reward=reward, options=options, name=name)


def _log_to_trl(columns: dict, answers: list[dict]) -> None:
    """Newer TRL versions pass log_extra / log_metric: the verdicts go to its completions table."""
    log_extra, log_metric = columns.get("log_extra"), columns.get("log_metric")
    if callable(log_extra):
        log_extra("kernelopt_status", [a["status"] for a in answers])
        log_extra("kernelopt_interval", [a.get("speedup_interval") for a in answers])
        log_extra("kernelopt_flags", [list(a.get("flags") or ()) for a in answers])
    if callable(log_metric) and answers:
        log_metric("kernelopt/correct", sum(1.0 for a in answers if a["correct"]) / len(answers))
        log_metric("kernelopt/unscorable", sum(1.0 for a in answers if a["status"] == "unscorable") / len(answers))


trl_reward = TRLReward()
trl_reward_async = TRLRewardAsync()


# -- OpenRLHF -------------------------------------------------------------------------------------

def reward_func(queries: list[str], prompts: list[str], labels: list[str], *, url: str | None = None,
                failure_reward: float = 0.0, **_) -> dict:
    """OpenRLHF's custom reward function (--remote_rm_url path/to/this/file.py): each query is a
    prompt and its response, each label names the problem. The service takes the response as
    what follows the prompt in the query, and calls a sample whose query does not start with its
    prompt (truncated from the left) unscorable. Returns {"rewards", "scores" (1.0 when correct:
    for dynamic filtering), "extra_logs"} as tensors, as OpenRLHF expects (0.8 concatenates them,
    0.11 reads one number per sample). When the service cannot answer at all, every sample gets
    `failure_reward` with a warning (OpenRLHF cannot skip a sample)."""
    import torch

    try:
        answer = client_for(url).post("/v1/openrlhf", {"query": list(queries), "prompts": list(prompts),
                                                       "labels": list(labels)})
    except RewardServiceError as exc:
        _unscorable(exc, failure_reward)
        count = len(queries)
        answer = {"rewards": [failure_reward] * count, "scores": [0.0] * count,
                  "extra_logs": {key: [1.0 if key == "kernelopt_unscorable" else 0.0] * count
                                 for key in ("kernelopt_correct", "kernelopt_speedup", "kernelopt_unscorable",
                                             "kernelopt_interval", "kernelopt_flagged")}}
    return {"rewards": torch.tensor(answer["rewards"], dtype=torch.float),
            "scores": torch.tensor(answer["scores"], dtype=torch.float),
            "extra_logs": {key: torch.tensor(values, dtype=torch.float)
                           for key, values in answer["extra_logs"].items()}}

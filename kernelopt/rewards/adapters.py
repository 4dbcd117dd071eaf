"""Reward functions for RL trainers, computed by a running reward service (`kernelopt serve`,
docs/serve.md), so the trainer's process never runs a candidate nor holds a GPU for judging.

The service's URL comes from the `url` argument or the environment variable
KERNELOPT_REWARD_URL (read at each call, so it can be set after import). A problem is named by
a string, as in the service's API: a reference program (any text with a line break) or an id of
the service's loaded set (e.g. "1/3" or a problem name); a dict {"id": ...} or {"source": ...}
is passed through.

- verl: `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`, its
  custom reward function (`custom_reward_function.path` = this file; the name is verl's
  default). `ground_truth` names the problem. Returns a float; with `details=True` (verl's
  `custom_reward_function.reward_kwargs`) a dict with "score" plus the verdict, which verl logs.
  `compute_score_async` is the same for verl's asynchronous reward loop.
- TRL: `make_trl_reward(...)` / `make_trl_reward_async(...)` build GRPOTrainer reward functions
  `(prompts, completions, **columns) -> list[float]`; the problem comes from a dataset column
  ("problem" by default, else "ground_truth"). `trl_reward` and `trl_reward_async` are ready-made.
- OpenRLHF: `reward_func(queries, prompts, labels)` (this file works as --remote_rm_url
  directly); it sends the batch to the service's OpenRLHF endpoint and returns OpenRLHF's dict
  of tensors. OpenRLHF can also call that endpoint itself (--remote_rm_url URL/v1/openrlhf).

Failures: a candidate that fails (no program, compile error, wrong, slow, caught cheating) gets
its reward from the service; that is the training signal. A failure of the service (not
reachable, a bad request, a broken reference, a timeout) raises `RewardServiceError`: a reward
made up for it would train the model on noise. Overloaded answers (429/503) are retried after
the Retry-After the service sends, for up to `retry_for` seconds.

Standard library only (urllib, threads, asyncio); torch only for OpenRLHF's tensors.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import urllib.error
import urllib.request
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
                  reward: str | None = None, options: dict | None = None, details: bool = False, **_):
    """verl's custom reward function: the reward of `solution_str` (the decoded response) for the
    problem `ground_truth` names. `data_source` and `extra_info` are not needed. With details,
    a dict: "score" (the reward), "correct" (1.0/0.0), "speedup" (0.0 unless correct), "status"."""
    answer = client_for(url).evaluate(ground_truth, solution_str, reward, options)
    return _verl_result(answer, details)


async def compute_score_async(data_source, solution_str: str, ground_truth, extra_info=None, *,
                              url: str | None = None, reward: str | None = None, options: dict | None = None,
                              details: bool = False, **_):
    """`compute_score` as a coroutine (verl's reward loop awaits coroutine reward functions)."""
    answer = await client_for(url).evaluate_async(ground_truth, solution_str, reward, options)
    return _verl_result(answer, details)


def _verl_result(answer: dict, details: bool):
    if not details:
        return float(answer["reward"])
    return {"score": float(answer["reward"]), "correct": 1.0 if answer["correct"] else 0.0,
            "speedup": float(answer["speedup"] or 0.0), "status": answer["status"]}


# -- TRL ------------------------------------------------------------------------------------------

def completion_text(completion) -> str:
    """A TRL completion as text: a string as is; a conversational one (a list of messages) as
    the text of its assistant messages, in order (the program is the last one defining ModelNew)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    texts = []
    for message in completion:
        if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
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


def make_trl_reward(url: str | None = None, *, column: str | None = None, reward: str | None = None,
                    options: dict | None = None, name: str = "kernelopt_reward"):
    """A GRPOTrainer reward function. Requests of a batch are sent concurrently."""
    client = client_for(url)

    def kernelopt_reward(prompts, completions, **columns) -> list[float]:
        problems = problems_from_columns(columns, len(completions), column)
        answers = client.evaluate_many(problems, [completion_text(c) for c in completions], reward, options)
        _log_to_trl(columns, answers)
        return [float(a["reward"]) for a in answers]

    kernelopt_reward.__name__ = kernelopt_reward.__qualname__ = name  # TRL logs rewards under this name
    return kernelopt_reward


def make_trl_reward_async(url: str | None = None, *, column: str | None = None, reward: str | None = None,
                          options: dict | None = None, name: str = "kernelopt_reward"):
    """The same as a coroutine function: TRL runs async reward functions concurrently with the
    others on its event loop."""
    client = client_for(url)

    async def kernelopt_reward(prompts, completions, **columns) -> list[float]:
        problems = problems_from_columns(columns, len(completions), column)
        answers = await client.evaluate_many_async(problems, [completion_text(c) for c in completions],
                                                   reward, options)
        _log_to_trl(columns, answers)
        return [float(a["reward"]) for a in answers]

    kernelopt_reward.__name__ = kernelopt_reward.__qualname__ = name
    return kernelopt_reward


def _log_to_trl(columns: dict, answers: list[dict]) -> None:
    """Newer TRL versions pass log_extra / log_metric: the verdicts go to its completions table."""
    log_extra, log_metric = columns.get("log_extra"), columns.get("log_metric")
    if callable(log_extra):
        log_extra("kernelopt_status", [a["status"] for a in answers])
    if callable(log_metric) and answers:
        log_metric("kernelopt/correct", sum(1.0 for a in answers if a["correct"]) / len(answers))


trl_reward = make_trl_reward()
trl_reward_async = make_trl_reward_async()


# -- OpenRLHF -------------------------------------------------------------------------------------

def reward_func(queries: list[str], prompts: list[str], labels: list[str], *, url: str | None = None, **_) -> dict:
    """OpenRLHF's custom reward function (--remote_rm_url path/to/this/file.py): each query is a
    prompt and its response, each label names the problem. Returns {"rewards", "scores" (1.0
    when correct: for dynamic filtering), "extra_logs"} as tensors, as OpenRLHF expects."""
    import torch

    answer = client_for(url).post("/v1/openrlhf", {"query": list(queries), "prompts": list(prompts),
                                                   "labels": list(labels)})
    return {"rewards": torch.tensor(answer["rewards"], dtype=torch.float),
            "scores": torch.tensor(answer["scores"], dtype=torch.float),
            "extra_logs": {key: torch.tensor(values, dtype=torch.float)
                           for key, values in answer["extra_logs"].items()}}

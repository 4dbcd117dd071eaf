"""The reward service on a Ray cluster, in-process: `RewardPool`, for RL trainers that already
run on Ray (verl, OpenRLHF) and can call it from their reward hook without an HTTP hop.

    pool = RewardPool(problem_set, EvalOptions(timing_budget=2.0), reward="log_speedup:clip=2",
                      address="auto")                        # joins $RAY_ADDRESS's cluster
    answers = pool.score([{"problem": "1/19", "completion": text}, ...])
    rewards = [a["reward"] for a in answers]

A request is what POST /v1/evaluate takes (problem, completion, and optionally reward and
options) and an answer is what it returns (verdict and reward), so a trainer can move between
the HTTP service and the pool without changing its data. Behind `score`: the same
RewardService as `kernelopt serve` (parsing, admission, one lane per problem batching its
completions), whose lanes judge on the cluster's actors (kernelopt/cluster: one per GPU, warm
Evaluators, a dead actor's work retried on a new one). Lanes run at once up to one per actor.

`shared_pool(...)` keeps one pool per process (a reward hook is called again for every batch);
`verl_batch_score` is verl's batched custom reward function over it (docs/rewards.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from kernelopt.kernelbench import Problem
from kernelopt.rewards.service.core import RewardService
from kernelopt.sandbox.results import EvalOptions


class RewardPool:
    """A handle on judging actors with a batched `score(requests)`. `problems`: the problems
    requests may name by id (Problems, or a problem set's location as `--kernelbench` takes it).
    `pool`: an existing
    kernelopt.cluster.JudgePool (else one is started from address, device, actors,
    cpus_per_actor: see kernelopt.cluster.ClusterSpec)."""

    def __init__(self, problems: Iterable[Problem] = (), options: EvalOptions | None = None, *,
                 reward: str = "speedup", address: str | None = "auto", device: str = "auto",
                 actors: int | None = None, cpus_per_actor: float = 1.0, jobs: int = 2, queue_size: int = 4096,
                 request_timeout: float = 1800.0, pool=None):
        from kernelopt.cluster import ClusterSpec, JudgePool

        if isinstance(problems, str):
            from kernelopt.kernelbench import load_problem_set

            problems = load_problem_set(problems)
        self.pool = pool or JudgePool.start(ClusterSpec(address=address, device=device, actors=actors,
                                                        cpus_per_actor=cpus_per_actor))
        # Each actor judges on its own device; the driver's copy of the options only parses requests.
        options = (options or EvalOptions()).model_copy(update={"device": "cpu"})
        self.service = RewardService(problems, options, reward=reward, jobs=jobs, queue_size=queue_size,
                                     concurrency=self.pool.size, request_timeout=request_timeout,
                                     cache_size=2 * self.pool.size, evaluator_factory=self.pool.evaluator_factory())
        self._owns_pool = pool is None

    def score(self, requests: Sequence[dict]) -> list[dict]:
        """Each request's answer (verdict and reward), in order; blocks until all are judged.
        Raises kernelopt.rewards.service.ServiceError for a bad request (BadRequest) or when no
        verdict can be given (a broken reference, a timeout)."""
        items = [self.service.parse_evaluate(dict(request)) for request in requests]
        return self.service.evaluate(items) if items else []

    def rewards(self, problems: Sequence, completions: Sequence[str]) -> list[float]:
        """The reward of each completion for its problem (an id of the loaded set or a reference
        source)."""
        if len(problems) != len(completions):
            raise ValueError(f"{len(problems)} problems for {len(completions)} completions")
        return [a["reward"] for a in self.score([{"problem": p, "completion": c}
                                                 for p, c in zip(problems, completions)])]

    def close(self) -> None:
        self.service.close()
        if self._owns_pool:
            self.pool.close()

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


_shared: RewardPool | None = None
_shared_lock = threading.Lock()


def shared_pool(**settings) -> RewardPool:
    """This process's RewardPool, started on first use with `settings` (RewardPool's keywords);
    later calls return the same one."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = RewardPool(**settings)
        return _shared


def verl_batch_score(data_sources, solution_strs, ground_truths, extra_infos=None, **settings) -> list[float]:
    """verl's batched custom reward function (reward_model.reward_manager=batch): each
    ground_truth names the problem (an id of the pool's set or a reference source), each
    solution_str is the model's answer. `settings` (verl's custom_reward_function.reward_kwargs)
    start the shared pool on the first call."""
    return shared_pool(**settings).rewards(list(ground_truths), list(solution_strs))

"""The judging actor: what runs on a cluster node, one per GPU (or per share of a CPU-only
node's cores). It holds warm Evaluators exactly as a local run does (kernelopt/sandbox/batch.py:
a warm reference worker per problem, candidates judged one at a time), so a verdict from an
actor is the verdict a local run gives. Ray runs an actor's calls one at a time, so one timing
runs at a time per GPU, as locally.

This module does not import ray: `JudgeWorker` is a plain class that the pool (pool.py) turns
into an actor, and that tests can use in-process."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import kernelopt
from kernelopt.kernelbench import Problem, ProblemError
from kernelopt.sandbox.device import device_model
from kernelopt.sandbox.hardware import Hardware, describe
from kernelopt.sandbox.results import EvalOptions, EvalResult, Judge

WARM_EVALUATORS = 2  # per actor: each holds a reference worker and a spare candidate worker
_CORE_LOCKS = Path("/tmp/kernelopt-ray-cores")


class JudgeWorker:
    """Judges candidates on one device of one node. `device`: "cuda" (the GPU Ray gave this
    actor, seen as cuda:0) or "cpu"; `cores`: on CPU, how many of the node's cores it claims
    for its timings (concurrent timings must not share a core, as runner.core_shares ensures
    locally)."""

    def __init__(self, device: str, cores: int = 1):
        self.device = "cuda:0" if device.startswith("cuda") else "cpu"
        self._locks: list = []
        self.cores = self._claim_cores(max(1, cores)) if self.device == "cpu" else None
        self.device_model = device_model(self.device)
        self.hardware = describe_hardware(self.device)
        self._evaluators: OrderedDict[tuple, Judge] = OrderedDict()  # sandbox.batch.Evaluators

    def info(self) -> dict:
        """Where this actor runs and what it judges on (the pool checks and records it)."""
        return {"pid": os.getpid(), "node": socket.gethostname(), "device": self.device,
                "device_model": self.device_model, "cores": self.cores, "kernelopt": kernelopt.__version__,
                "hardware": self.hardware}

    def judge(self, problem: Problem, options: EvalOptions, sources: list[str], jobs: int = 1,
              health: bool = False) -> dict:
        """Every source's verdict, in order, with the problem's warm Evaluator; with `health`,
        the reference's health first (sandbox/problem_health.py). A reference that fails is answered
        as {"problem_error": message}, not raised: it is the problem's outcome."""
        from kernelopt.sandbox.problem_health import check_health

        options = options.model_copy(update={"device": self.device})
        answer: dict = {"device_model": self.device_model, "node": socket.gethostname(), "pid": os.getpid()}
        try:
            evaluator = self._evaluator(problem, options, jobs)
            if health:
                answer["health"] = check_health(evaluator, options).as_dict()
            results: list[EvalResult | None] = [None] * len(sources)
            for index, result in evaluator.evaluate_many(sources):
                results[index] = result
            answer["results"] = results
        except ProblemError as exc:
            self._discard(problem, options, jobs)
            answer["problem_error"] = exc.cause
        except BaseException:
            self._discard(problem, options, jobs)  # its state after a failure is unknown
            raise
        return answer

    def close(self) -> None:
        while self._evaluators:
            self._evaluators.popitem(last=False)[1].close()

    def _evaluator(self, problem: Problem, options: EvalOptions, jobs: int) -> Judge:
        from kernelopt.sandbox.batch import Evaluator

        key = _key(problem, options, jobs)
        evaluator = self._evaluators.get(key)
        if evaluator is None:
            evaluator = self._evaluators[key] = Evaluator(problem, options, jobs=jobs)
            while len(self._evaluators) > WARM_EVALUATORS:
                self._evaluators.popitem(last=False)[1].close()
        self._evaluators.move_to_end(key)
        return evaluator

    def _discard(self, problem: Problem, options: EvalOptions, jobs: int) -> None:
        evaluator = self._evaluators.pop(_key(problem, options, jobs), None)
        if evaluator is not None:
            evaluator.close()

    def _claim_cores(self, count: int) -> list[int]:
        """A share of `count` cores no other actor of this node holds (a lock file per core,
        released by the kernel when this process dies), and this process confined to it: the
        referee pins timed calls to this process's last cores. When the node has no free share
        (more actors than cores), every core, shared: timings then disturb each other."""
        cores = sorted(os.sched_getaffinity(0))
        _CORE_LOCKS.mkdir(parents=True, exist_ok=True)
        for start in range(0, len(cores) - count + 1, count):
            share = cores[start:start + count]
            held = [self._lock(core) for core in share]
            if all(held):
                self._locks.extend(held)
                os.sched_setaffinity(0, share)
                return share
            for handle in filter(None, held):
                handle.close()
        return cores

    @staticmethod
    def _lock(core: int):
        handle = open(_CORE_LOCKS / f"core-{core}.lock", "w")  # noqa: SIM115 - held for the actor's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return None
        return handle


def _key(problem: Problem, options: EvalOptions, jobs: int) -> tuple:
    return problem.content_hash, problem.name, options.model_dump_json(), jobs


def describe_hardware(device: str) -> Hardware:
    """The device as the agent's prompt describes it (sandbox/hardware.py), seen from this node.
    A GPU is described by a short-lived child process: asking torch initialises CUDA, and a CUDA
    context held by the actor for its whole life would take memory from the candidates."""
    if not device.startswith("cuda"):
        return describe(device)
    code = ("import json; from kernelopt.sandbox.hardware import describe; h = describe('cuda:0'); "
            "print(json.dumps([h.summary, h.facts]))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        summary, facts = json.loads(done.stdout.strip().splitlines()[-1])
        return Hardware(summary=summary, facts=facts)
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return Hardware(summary=f"an {device_model(device)} GPU", facts=[])



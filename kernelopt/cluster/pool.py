"""`JudgePool`: the driver's handle on the judging actors, and the one way work reaches them.

    pool = JudgePool.start(ClusterSpec(address="local", device="cpu"))
    answer = pool.judge(problem, options, sources)    # an idle actor, the problem's warm one first
    pool.close()

- One actor per GPU (`num_gpus=1`), or on a CPU-only cluster one per `cpus_per_actor` cores;
  the count fits the cluster's resources, and a request the cluster cannot meet (a GPU on a
  cluster without one, more actors than it can place) is a ClusterError before any work, never
  a wait for resources that will not come.
- Each call checks out an idle actor (the one that judged the problem last, while it is idle:
  its Evaluator is warm), so there is at most one call per actor, and so one timing per device.
- An actor that dies during a call (its process killed, its node lost) is replaced by a new one
  and the call is made again on it: the driver records a verdict only when the call returns, so
  nothing is lost and nothing is recorded twice.
- The driver alone writes results; actors only answer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kernelopt.cluster.actor import WARM_EVALUATORS, JudgeWorker
from kernelopt.cluster.connect import ClusterError, connect
from kernelopt.kernelbench import Problem, ProblemError
from kernelopt.sandbox.results import EvalOptions, EvalResult

if TYPE_CHECKING:
    from kernelopt.sandbox.hardware import Hardware

CALL_ATTEMPTS = 3        # a call is tried on up to this many actors (each replacing a dead one)
PLACEMENT_TIMEOUT_S = 300.0  # an actor's process start and imports; past it, the cluster cannot place it
_Item = TypeVar("_Item")  # what run_on_pool hands out


@dataclass(frozen=True)
class ClusterSpec:
    """What the command line's --ray options ask for (cli/options.add_ray_options)."""

    address: str | None = "local"
    device: str = "auto"                 # auto: GPU actors when the cluster has GPUs, else CPU actors
    actors: int | None = None            # default: every GPU, or every share of cores
    cpus_per_actor: float = 1.0          # CPU actors: the cores each claims for its timings
    mix_devices: bool = False            # allow actors on different device models in one run


class _Slot:
    """One actor and what the driver knows of it."""

    def __init__(self, handle, info: dict):
        self.handle, self.info = handle, info
        self.warm: OrderedDict[tuple, None] = OrderedDict()  # mirrors the actor's warm Evaluators

    def touch(self, key: tuple) -> None:
        self.warm[key] = None
        self.warm.move_to_end(key)
        while len(self.warm) > WARM_EVALUATORS:
            self.warm.popitem(last=False)


class JudgePool:
    def __init__(self, ray, spec: ClusterSpec, device: str, actor_options: dict, count: int):
        self._ray, self.spec, self.device = ray, spec, device
        self._actor_class = ray.remote(JudgeWorker).options(**actor_options)
        self._cond = threading.Condition()
        self._slots: list[_Slot] = []
        self._idle: list[_Slot] = []
        self.replaced = 0  # actors replaced after dying (for reports and tests)
        self._closed = False
        self._add(count)

    # -- starting ------------------------------------------------------------------------------

    @classmethod
    def start(cls, spec: ClusterSpec) -> JudgePool:
        """Connect (starting a local instance for address "local") and place the actors."""
        ray = connect(spec.address, num_cpus=_local_cpus(spec))
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), float(resources.get("CPU", 0))
        if spec.device.startswith("cuda") and not gpus:
            raise ClusterError(f"--device {spec.device}: the Ray cluster has no GPU (resources: {cpus:g} CPUs); "
                               "add GPU nodes (`ray start --address ...` on each, docs/scale.md) or use --device cpu")
        if spec.device.startswith("cuda") or (spec.device == "auto" and gpus):
            per_actor: dict[str, float] = {"num_gpus": 1, "num_cpus": 1}
            device, limit = "cuda", gpus
        else:
            if spec.cpus_per_actor <= 0:
                raise ClusterError(f"--ray-cpus-per-actor must be positive, not {spec.cpus_per_actor:g}")
            device, per_actor = "cpu", {"num_gpus": 0, "num_cpus": spec.cpus_per_actor}
            limit = int(cpus // spec.cpus_per_actor)
        count = spec.actors if spec.actors is not None else limit
        if count < 1 or count > limit:
            unit = "GPU" if device == "cuda" else f"{spec.cpus_per_actor:g} CPUs"
            raise ClusterError(f"{count} judging actors of one {unit} each do not fit the cluster ({gpus} GPUs, "
                               f"{cpus:g} CPUs): ask for at most {limit} (--ray-actors)"
                               + ("" if device == "cuda" else " or fewer CPUs each (--ray-cpus-per-actor)"))
        options = {**per_actor, "max_restarts": 0, "max_concurrency": 1}
        return cls(ray, spec, device, options, count)

    def _add(self, count: int) -> list[_Slot]:
        cores = max(1, int(self.spec.cpus_per_actor))
        handles = [self._actor_class.remote(self.device, cores) for _ in range(count)]
        try:
            infos = self._ray.get([h.info.remote() for h in handles], timeout=PLACEMENT_TIMEOUT_S)
        except self._ray.exceptions.GetTimeoutError:
            for handle in handles:
                self._ray.kill(handle)
            raise ClusterError(f"the cluster could not start {count} judging actor(s) on {self.device} within "
                               f"{PLACEMENT_TIMEOUT_S:g} s: it lacks the resources, or its nodes cannot import "
                               "kernelopt (run `kernelopt doctor --ray` to see each node)") from None
        slots = [_Slot(h, i) for h, i in zip(handles, infos)]
        models = {s.info["device_model"] for s in [*self._slots, *slots]}
        if len(models) > 1 and not self.spec.mix_devices:
            for handle in handles:
                self._ray.kill(handle)
            raise ClusterError(f"the judging actors run on different device models ({', '.join(sorted(models))}): "
                               "speedups measured on them are not comparable. Run one model per cluster, or "
                               "pass --ray-mix-devices (the summary then groups results by device model)")
        with self._cond:
            self._slots.extend(slots)
            self._idle.extend(slots)
            self._cond.notify_all()
        return slots

    # -- facts -------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        with self._cond:
            return len(self._slots)

    def actors(self) -> list[dict]:
        """Each actor's info: pid, node, device, device model, cores, kernelopt version."""
        with self._cond:
            return [dict(s.info) for s in self._slots]

    def busy_actors(self) -> list[dict]:
        """The info of each actor judging now (for progress reports and tests)."""
        with self._cond:
            return [dict(s.info) for s in self._slots if s not in self._idle]

    @property
    def device_models(self) -> list[str]:
        return sorted({a["device_model"] for a in self.actors()})

    @property
    def agent_device(self) -> str:
        """The device a search's settings name for candidates judged here ("cuda:0" is each GPU
        actor's own view of its GPU)."""
        return "cuda:0" if self.device == "cuda" else "cpu"

    @property
    def hardware(self):
        """The device the candidates are timed on, as the agent's prompt describes it (an
        actor's view: sandbox/hardware.Hardware)."""
        return self.actors()[0]["hardware"]

    def describe(self) -> str:
        nodes = {a["node"] for a in self.actors()}
        return (f"{self.size} judging actor(s) on {self.device} ({', '.join(self.device_models)}) over "
                f"{len(nodes)} node(s)")

    # -- calls ---------------------------------------------------------------------------------

    def judge(self, problem: Problem, options: EvalOptions, sources: list[str], *, jobs: int = 1,
              health: bool = False) -> dict:
        """JudgeWorker.judge on an idle actor, the problem's warm one first; retried on a new
        actor when the one judging dies. Raises ProblemError when the reference fails (its
        `health` attribute: the health probe's outcome, when one was asked for), and what the
        Evaluator raises (SandboxError, IsolationError) as itself."""
        key = (problem.content_hash, problem.name, options.model_dump_json(), jobs)
        answer = self._call(key, lambda handle: handle.judge.remote(problem, options, sources, jobs, health))
        if "problem_error" in answer:
            error = ProblemError(problem.path, answer["problem_error"])
            error.health = answer.get("health")  # probed before the reference failed: still worth recording
            raise error
        return answer

    def _call(self, key: tuple, submit: Callable) -> dict:
        ray = self._ray
        # The actor's process or node is gone (killed, out of memory, the node lost): its call
        # is made again on a new actor.
        died = (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError, ray.exceptions.OutOfMemoryError)
        for attempt in range(1, CALL_ATTEMPTS + 1):
            slot = self._checkout(key)
            try:
                answer = ray.get(submit(slot.handle))
            except died as exc:
                self._replace(slot)
                if attempt == CALL_ATTEMPTS:
                    raise ClusterError(f"{CALL_ATTEMPTS} judging actors died in turn on one call; last: {exc}") from None
                continue
            except ray.exceptions.RayTaskError as exc:
                self._release(slot)
                cause = getattr(exc, "cause", None)
                raise (cause if isinstance(cause, Exception) else exc) from None
            except Exception:
                self._release(slot)
                raise
            except BaseException:  # Ctrl-C: the actor still runs the call; it stays busy, so close() kills it
                raise
            slot.touch(key)
            self._release(slot)
            return answer
        raise AssertionError("unreachable")

    def _checkout(self, key: tuple) -> _Slot:
        with self._cond:
            while not self._idle:
                if self._closed:
                    raise ClusterError("the judging pool is closed")
                self._cond.wait()
            slot = next((s for s in self._idle if key in s.warm), None)
            # Otherwise the actor with the fewest warm Evaluators (its cache has room).
            slot = slot or min(self._idle, key=lambda s: len(s.warm))
            self._idle.remove(slot)
            return slot

    def _release(self, slot: _Slot) -> None:
        with self._cond:
            if slot in self._slots:
                self._idle.append(slot)
                self._cond.notify()

    def _replace(self, dead: _Slot) -> None:
        """A new actor in place of a dead one (Ray places it wherever resources are free)."""
        with self._cond:
            if dead in self._slots:
                self._slots.remove(dead)
        try:
            self._ray.kill(dead.handle)
        except Exception:  # noqa: BLE001 - it is dead already
            pass
        self.replaced += 1
        if not self._closed:
            self._add(1)

    def close(self) -> None:
        """Stop every actor: an idle one closes its Evaluators first (their workers stop
        cleanly); a busy one (an interrupted run) is killed at once, and its workers end when
        their pipes close."""
        with self._cond:
            self._closed = True
            slots, idle = list(self._slots), list(self._idle)
            self._slots, self._idle = [], []
            self._cond.notify_all()
        closing = [slot.handle.close.remote() for slot in idle]
        if closing:
            try:
                self._ray.wait(closing, num_returns=len(closing), timeout=30)
            except Exception:  # noqa: BLE001 - best effort; the kill below ends them anyway
                pass
        for slot in slots:
            self._ray.kill(slot.handle)

    def __enter__(self) -> JudgePool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- what the local code paths expect ------------------------------------------------------

    def evaluator(self, problem: Problem, options: EvalOptions, jobs: int = 1) -> RemoteEvaluator:
        return RemoteEvaluator(self, problem, options, jobs)

    def evaluator_factory(self) -> Callable[[Problem, EvalOptions, int], RemoteEvaluator]:
        """For RewardService(evaluator_factory=...): each lane judges on the pool."""
        return lambda problem, options, jobs: RemoteEvaluator(self, problem, options, jobs)


class RemoteEvaluator:
    """The Judge protocol (sandbox/results.py) over the pool: what the code that drives a local
    Evaluator (the reward service's lanes, the bench, the agent's search) gets on a cluster."""

    def __init__(self, pool: JudgePool, problem: Problem, options: EvalOptions, jobs: int = 1):
        self.pool, self.problem, self.options, self.jobs = pool, problem, options, jobs
        self._last_model: str | None = None  # of the actor that answered last

    @property
    def device_model(self) -> str | None:
        """The model of the device the last answer came from (the pool's, before any)."""
        return self._last_model or self.pool.device_models[0]

    @property
    def hardware(self) -> Hardware:
        """The actors' device, not the driver's."""
        return self.pool.hardware

    def evaluate(self, source: str) -> EvalResult:
        return self.evaluate_all([source])[0]

    def evaluate_many(self, sources: Iterable[str], jobs: int | None = None) -> Iterator[tuple[int, EvalResult]]:
        yield from enumerate(self.evaluate_all(list(sources)))

    def evaluate_all(self, sources: list[str]) -> list[EvalResult]:
        answer = self.pool.judge(self.problem, self.options, sources, jobs=self.jobs)
        self._last_model = answer["device_model"]
        return answer["results"]

    def health(self) -> dict:
        answer = self.pool.judge(self.problem, self.options, [], jobs=self.jobs, health=True)
        self._last_model = answer["device_model"]
        return answer["health"]

    def close(self, at_once: bool = False) -> None:
        pass  # the actor keeps its Evaluator warm for the next call on this problem


def run_on_pool(items: list[_Item], pool: JudgePool, work: Callable[[_Item], None], per_actor: int = 1) -> None:
    """work(item) for every item from `pool.size * per_actor` driver threads (each blocks on
    its actor calls; per_actor > 1 when work also waits on other things, such as an LLM). The
    first exception stops the handing out and is raised when the items in progress are done."""
    threads = max(1, pool.size * per_actor)
    queue = list(items)
    queue.reverse()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kernelopt-ray") as executor:
        running: set[Future[None]] = set()
        error: BaseException | None = None
        while queue or running:
            while queue and len(running) < threads and error is None:
                running.add(executor.submit(work, queue.pop()))
            if not running:
                break
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                if future.exception() is not None and error is None:
                    error = future.exception()
        if error is not None:
            raise error


def _local_cpus(spec: ClusterSpec) -> float | None:
    """A local instance's CPUs: enough for the actors asked for (fractional shares allowed)."""
    if spec.address != "local" or spec.actors is None or spec.device.startswith("cuda"):
        return None
    import os

    return max(os.cpu_count() or 1, int(spec.actors * spec.cpus_per_actor + 0.999))

"""Judging many candidates of one problem: the `Evaluator`, with warm workers and reuse.

    with Evaluator(problem, options, jobs=2) as evaluator:
        for index, result in evaluator.evaluate_many(sources):
            ...

Every candidate gets the verdict a lone evaluation would give it (`evaluate` below is this
class with one candidate). What an Evaluator keeps across candidates, and why none of
it can leak between them (docs/referee.md, "The Evaluator"):

- The reference worker stays warm: one process, which only ever runs the trusted reference, is
  re-loaded for each candidate (problem module re-executed, model re-instantiated from the init
  seed). It is checked before each use (alive, and a ping answered in step) and replaced after
  any failure of its own, or whenever a conversation with it was cut short.
- Candidate workers are never reused: one process per candidate, discarded after its verdict.
  One spare is started ahead (its torch import then overlaps the previous candidate's
  evaluation); with `jobs > 1` the next candidates also load (compile) ahead, while the current
  one is judged. Correctness and timing run for one candidate at a time.
- The correctness trials use input seeds drawn once per Evaluator, and the reference's outputs
  for them are computed once and kept on the host (up to `CACHED_OUTPUTS_MAX_BYTES`).
- Timing is never reused: every candidate is timed interleaved with the reference, on fresh
  secret inputs, exactly as in a lone evaluation.
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import random
import secrets
import shutil
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from kernelopt.kernelbench import Problem
from kernelopt.sandbox import containment, derived, device_slots, isolation, scratch
from kernelopt.sandbox.calls import run_call, transport_for
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.fingerprints import Fingerprinter
from kernelopt.sandbox.process import SandboxError, WorkerDied, WorkerProcess, WorkerTimeout
from kernelopt.sandbox.device import default_memory_limit, device_model, resolve_device
from kernelopt.sandbox.hardware import Hardware
from kernelopt.sandbox.hardware import describe as describe_hardware
from kernelopt.sandbox.records import InputSet, ReferenceTrials
from kernelopt.sandbox.session import CandidateSession, load_message
from kernelopt.sandbox.worker import commands
from kernelopt.sandbox.results import EvalOptions, EvalResult
from kernelopt.sandbox.worker.wire import PROTOCOL_VERSION

# Host memory the reference's correctness outputs may take; larger outputs are not kept and
# the reference runs the trials again for every candidate.
CACHED_OUTPUTS_MAX_BYTES = 512 << 20
_PING_TIMEOUT_S = 30.0  # an idle worker answers a ping at once; this only bounds a stuck one


@dataclass(frozen=True)
class WorkersUsed:
    """Which worker processes (host pids) judged a candidate; for tests and diagnostics."""

    serial: int  # the candidate's number in this Evaluator, counting from 0
    candidate_pid: int | None
    reference_pid: int | None  # None when the verdict came before the reference was needed


class Evaluator:
    """Judges candidates of one problem under one set of options on one device.

    Raises what `kernelopt.sandbox.evaluate` raises: ValueError for an unusable device,
    IsolationError for an unusable backend (both when constructed), ProblemError when the
    reference fails, SandboxError when a worker cannot start. Every failure of a candidate is
    that candidate's verdict and touches no other candidate."""

    def __init__(self, problem: Problem, options: EvalOptions | None = None, *, jobs: int = 1,
                 keep_spare: bool = True):
        self.problem = problem
        self.options = options or EvalOptions()
        self.jobs = max(1, int(jobs))
        self.keep_spare = keep_spare  # start a spare after the last known candidate too
        self.device = resolve_device(self.options.device)
        self.backend = isolation.select_backend(self.options.isolation, self.options.image)
        if self.backend.name == "docker":
            from kernelopt.sandbox import containers

            containers.connect(self.backend.image, self.device)  # raises DockerError saying what to fix
        else:
            containment.current()  # raises ContainmentError for a KERNELOPT_CONTAINMENT that cannot work here
        self.workers_used: list[WorkersUsed] = []
        self._seeds = _SeedPlan(self.options, trials=self.options.correctness_trials)
        self._expected: ReferenceTrials | None = None
        self._reference_profile = None  # the profiling pass's reference part (session._profile_pass)
        self._serials = itertools.count()
        self._root: Path | None = None
        self._starter: _WorkerStarter | None = None
        self._keeper: device_slots.Keeper | None = None  # the device slots' keeper, where one is used
        self._reference: _WarmReference | None = None
        self._candidates: _CandidateWorkers | None = None
        self._closed, self._closing = False, threading.Lock()
        # A problem judged as several plain ones (its input configurations, its training
        # passes): an Evaluator for each (derived.py).
        self._parts = derived.plan(problem, self.options,
                                   lambda part, options: Evaluator(part, options, jobs=jobs, keep_spare=keep_spare))

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> Evaluator:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def start(self) -> None:
        """Start the reference worker and the first candidate worker (both import torch in
        the background). Called by `with` and by the first evaluation."""
        if self._closed:
            raise RuntimeError("this Evaluator is closed")
        if self._starter is not None or self._parts is not None:  # each part's Evaluator starts on first use
            return
        self._root = scratch.make_root()
        self._keeper = device_slots.start_keeper(self.device, self.backend.name)
        self._starter = _WorkerStarter(self.problem.source, self.backend, self.device,
                                       self.options.memory_limit or default_memory_limit(),
                                       self._root, self.options.timeout, self._keeper)
        self._reference = _WarmReference(self._starter)
        self._candidates = _CandidateWorkers(self._starter)
        self._candidates.restock()

    @property
    def _warm(self) -> _WarmReference:
        """The reference's warm worker (`start` makes it)."""
        if self._reference is None:
            raise RuntimeError("the Evaluator is not started")
        return self._reference

    def close(self, at_once: bool = False) -> None:
        """Stop every worker and remove the scratch directories (unless keep_scratch). At once:
        kill them without asking them to quit (an interrupt; an evaluation in flight then fails).
        Once: an interrupt closes from the main thread while the evaluating thread, seeing its
        worker killed, closes too."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
        if self._parts is not None:
            self._parts.close(at_once)
        if self._candidates is not None:
            self._candidates.close(at_once)
        if self._reference is not None:
            self._reference.discard(at_once)
        if self._starter is not None:
            self._starter.close()
        if self._keeper is not None:
            self._keeper.close()
        if self._root is not None and not self.options.keep_scratch:
            shutil.rmtree(self._root, ignore_errors=True)
        # The reference's trials (inputs and outputs) and the last session's data are held in
        # reference cycles (bound methods kept by the objects they belong to): without a
        # collection they outlived the Evaluator until Python's next full one, and a bench run's
        # host grew by GiBs over the problems of KernelBench v0.1.
        self._expected = self._reference_profile = None
        gc.collect()

    @property
    def reference_pid(self) -> int | None:
        """Host pid of the reference worker's process (the sandbox the host started)."""
        return self._reference.pid if self._reference is not None else None

    @property
    def spare_pid(self) -> int | None:
        """Host pid of the candidate worker started ahead for the next candidate, if any."""
        return self._candidates.spare_pid if self._candidates is not None else None

    # -- judging ----------------------------------------------------------------------------

    def probe_reference(self, seeds: list[int]) -> list[dict]:
        """Load the reference afresh and run it once per seed, in order (the calls share one
        process and RNG stream, as a program's calls do), each a window as an evaluation's;
        per call its outputs' shapes and dtypes (`meta`), the host's fingerprints of the
        outputs it read, and its time. For problem health checks. Raises ProblemError when the
        reference fails."""
        from kernelopt.kernelbench import ProblemError

        if self._parts is not None:  # the first part's reference
            return self._parts.probe_reference(seeds)
        self.start()
        worker = self._warm.ready()
        deadline = time.monotonic() + self.options.timeout
        load = load_message(self.backend, self.device, worker.scratch, host_builds=False, with_candidate=False)
        conversation = Conversation(self.problem, deadline, lambda request: commands.built(False))
        conversation.reference = worker
        transport = transport_for([worker], self.device)
        fingerprint = Fingerprinter(self._seeds.fingerprint_seed)
        try:
            self._request_ok(worker, load, deadline)
            records = []
            input_set: InputSet | None = None
            for seed in seeds:
                # One input set alive at a time (KernelBench's 4_Matrix_vector_multiplication_
                # at v0.1 has 8 GiB of inputs: four sets at once passed a worker's 47 GiB limit
                # on an H200), and a repeated seed's set reused, not made again: no reseeding
                # between the two calls, so a program drawing random numbers shows it.
                if input_set is None or input_set.seed != seed:
                    input_set = None  # dropped before the next is made
                    input_set = conversation.make_inputs([seed])[0]
                call = run_call(conversation, worker, input_set, transport=transport, device=self.device)
                records.append({"seed": call.record.seed, "ms": call.record.ms,
                                "meta": [list(m) for m in call.record.meta],
                                "fingerprints": [fingerprint(t) for t in call.outputs]})
        except (WorkerDied, WorkerTimeout) as exc:
            self._warm.discard()
            raise ProblemError(self.problem.path, f"the reference worker failed: {exc}") from None
        return records

    def _request_ok(self, worker: WorkerProcess, message: dict, deadline: float):
        reply, blobs = worker.request(message, deadline)
        self._check_ok(reply)
        return reply, blobs

    def _check_ok(self, reply: dict) -> None:
        from kernelopt.kernelbench.problem import reference_failure

        if not reply.get("ok"):
            raise reference_failure(self.problem, str(reply.get("error", reply)))

    # -- the rest of the Judge protocol (results.Judge) ----------------------------------------

    def health(self) -> dict:
        """The reference's health (problem_health.check_health on this Evaluator's reference);
        for a problem judged in parts, the first unhealthy part's (else the first's), named."""
        from kernelopt.sandbox.problem_health import check_health

        if self._parts is not None:
            return self._parts.health()
        return check_health(self, self.options).as_dict()

    @property
    def device_model(self) -> str:
        return device_model(self.options.device)

    @functools.cached_property
    def hardware(self) -> Hardware:
        """This machine's device, as the prompt describes it."""
        return describe_hardware(self.device)

    def evaluate(self, source: str) -> EvalResult:
        """Judge one candidate (the source of a file defining ModelNew)."""
        for _, result in self.evaluate_many([source], jobs=1):
            return result
        raise AssertionError("evaluate_many yielded nothing for one candidate")

    def evaluate_many(self, sources: Iterable[str], jobs: int | None = None) -> Iterator[tuple[int, EvalResult]]:
        """Judge several candidates; yields (index in `sources`, result) as each verdict is
        reached. Up to `jobs` candidates are in flight: one judged on the device, the others
        starting and loading (compiling) ahead. A verdict reached while loading (compile
        error, crash at import) is yielded at once."""
        self.start()
        if self._parts is not None:
            for index, source in enumerate(sources):
                yield index, self._parts.evaluate(source, self.workers_used)
            return
        jobs = max(1, int(jobs or self.jobs))
        queue = deque(enumerate(sources))
        loading: dict[Future, tuple[int, CandidateSession]] = {}
        loaded: deque[tuple[int, CandidateSession, EvalResult | None]] = deque()
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kernelopt-load") as pool:
            try:
                while queue or loading or loaded:
                    # `jobs` in flight: the next one to judge, and the others loading meanwhile.
                    while queue and len(loading) + len(loaded) < jobs:
                        index, source = queue.popleft()
                        session = self._new_session(source, restock=self.keep_spare or bool(queue))
                        loading[pool.submit(session.prepare)] = (index, session)
                    self._collect(loading, loaded, block=not loaded)
                    index, session, early = loaded.popleft()
                    try:
                        result = early if early is not None else self._judge(session)
                    finally:
                        self.workers_used.append(WorkersUsed(session.serial, session.candidate_pid,
                                                             session.reference_pid))
                        session.close()
                    yield index, result
            finally:
                self._abandon(loading, loaded)

    def _new_session(self, source: str, restock: bool) -> CandidateSession:
        serial = next(self._serials)
        candidates = self._candidates
        if candidates is None:
            raise RuntimeError("the Evaluator is not started")
        return CandidateSession(
            self.problem, source, self.options, self.device, self.backend,
            serial=serial, take_worker=lambda: candidates.take(restock=restock),
            seed_source=self._seeds.for_candidate(),
            trial_seeds=self._seeds.trial_seeds,
        )

    @staticmethod
    def _collect(loading: dict, loaded: deque, block: bool) -> None:
        """Move finished loads to `loaded`, in the order of their indices; wait for one when
        nothing is loaded yet. A load that raised (SandboxError) raises here."""
        if not loading:
            return
        done, _ = wait(list(loading), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for future in sorted(done, key=lambda f: loading[f][0]):
            index, session = loading.pop(future)
            try:
                early = future.result()
            except BaseException:
                session.close()
                raise
            loaded.append((index, session, early))

    def _judge(self, session: CandidateSession) -> EvalResult:
        """The candidate's correctness and timing, with the warm reference."""
        session.reference_profile = self._reference_profile
        try:
            result = session.judge(self._warm.ready, self._expected)
        except BaseException:
            # The reference failed (ProblemError) or the conversation with it was cut short
            # (an interrupt, a harness error): its state is unknown, so it is replaced.
            self._warm.discard()
            raise
        self._keep_expected(session.expected)
        if session.reference_profiled:
            # Kept for the next candidates; the worker is replaced: the profiler leaves a thread
            # of its own in it, which the next candidates' thread census would count against them.
            self._reference_profile = session.reference_profile
            self._warm.discard()
            if self.keep_spare:  # the next candidate's reference starts now, beside its load
                self._warm.launch()
        return result

    def _keep_expected(self, expected: ReferenceTrials | None) -> None:
        if self._expected is None and expected is not None and expected.nbytes <= CACHED_OUTPUTS_MAX_BYTES:
            self._expected = expected

    def _abandon(self, loading: dict, loaded: deque) -> None:
        """The consumer stopped early or something raised: stop the loads still running
        (killing their workers ends their waits) and close every session not yet judged."""
        for _, session in loading.values():
            session.abort()
        wait(list(loading))
        for _, session in loading.values():
            session.close()
        for _, session, _ in loaded:
            session.close()
        loading.clear()
        loaded.clear()


class _SeedPlan:
    """The secret draws of one Evaluator. The fingerprint pattern and the correctness trials'
    input seeds are drawn once, so the reference's trial outputs can be kept; each candidate's
    timing inputs come from draws of its own. With a fixed `seed`, every candidate sees the
    draws a lone evaluation with that seed would make."""

    def __init__(self, options: EvalOptions, trials: int):
        self._fixed = options.seed is not None
        source = random.Random(options.seed) if self._fixed else secrets.SystemRandom()
        self.fingerprint_seed = _draw(source)
        self.trial_seeds = [_draw(source) for _ in range(trials)]
        self._state = source.getstate() if self._fixed else None

    def for_candidate(self):
        if self._state is None:
            return secrets.SystemRandom()
        source = random.Random()
        source.setstate(self._state)
        return source


def _draw(source) -> int:
    return source.randrange(1, 2**31 - 1)


class _WorkerStarter:
    """Starts sandboxed workers of one Evaluator and checks their hello.

    Every worker is started from one thread that lives as long as the Evaluator: bubblewrap
    (--die-with-parent) kills its sandbox when the *thread* that started it ends, and the
    threads that load candidates ahead are short-lived."""

    def __init__(self, problem_source: str, backend: isolation.Backend, device: str, memory_limit: int,
                 root: Path, timeout: float, keeper: device_slots.Keeper | None = None):
        self.problem_source, self.backend, self.device = problem_source, backend, device
        self.memory_limit, self.root, self.timeout, self.keeper = memory_limit, root, timeout, keeper
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelopt-workers")

    def launch(self, role: str, directory: Path) -> WorkerProcess:
        """Start the process (it imports torch in the background); the hello is read later."""
        scratch = directory / role
        scratch.mkdir(parents=True)
        (scratch / "problem.py").write_text(self.problem_source)
        return self._thread.submit(WorkerProcess, role, backend=self.backend, scratch=scratch,
                                   device=self.device, memory_limit=self.memory_limit, keeper=self.keeper).result()

    def close(self) -> None:
        """After every worker is closed: the starting thread may end."""
        self._thread.shutdown(wait=True)

    def await_hello(self, worker: WorkerProcess) -> None:
        """Wait until the worker has imported torch; take its process and thread baseline."""
        try:
            hello, _ = worker.receive(time.monotonic() + self.timeout)
        except (WorkerDied, WorkerTimeout) as exc:
            worker.close()
            raise SandboxError(f"the {worker.role} worker could not start ({exc}) under the "
                               f"{self.backend.name} backend:\n{worker.log_tail()[-3000:]}") from None
        if hello.get("hello") != PROTOCOL_VERSION:
            worker.close()
            raise SandboxError(f"worker protocol {hello.get('hello')!r} != host protocol {PROTOCOL_VERSION}")
        worker.wakeup_filter = hello.get("wakeup_filter")
        _open_device_slots(worker, self.timeout)
        worker.record_baseline()


def _open_device_slots(worker: WorkerProcess, timeout: float) -> None:
    """Map the worker's first device slots before any program code runs, and before its thread
    baseline (mapping device memory starts the driver's threads). Where that fails (a driver or
    sandbox that cannot share device memory), the worker goes without slots, and an evaluation
    with it takes its outputs from the answers on both sides (calls.transport_for)."""
    if worker.slots is None:
        return
    try:
        message, fds = worker.slots.remake(1)
        try:
            worker.send_descriptors(fds)
        finally:
            for fd in fds:
                os.close(fd)
        reply, _ = worker.request(message, time.monotonic() + timeout)
        if not reply.get("ok"):
            raise device_slots.KeeperError(str(reply.get("error")))
    except (device_slots.KeeperError, SandboxError, WorkerDied, WorkerTimeout) as exc:
        device_slots.log.warning("the %s worker goes without device slots: %s", worker.role, exc)
        worker.slots.close()
        worker.slots = None


class _CandidateWorkers:
    """Fresh candidate workers, each handed out once; one spare started ahead of need."""

    def __init__(self, starter: _WorkerStarter):
        self._starter = starter
        self._lock = threading.Lock()
        self._spare: WorkerProcess | None = None
        self._count = itertools.count()
        self._closed = False

    @property
    def spare_pid(self) -> int | None:
        spare = self._spare
        return spare.process.pid if spare is not None else None

    def restock(self) -> None:
        """Start a spare if there is none; it imports torch while other work goes on."""
        with self._lock:
            if self._spare is None and not self._closed:
                self._spare = self._launch()

    def take(self, restock: bool) -> WorkerProcess:
        """A candidate worker that has said hello (the spare, or a new one). With `restock`,
        the next spare starts as soon as this one is ready, so it starts while this candidate
        is judged (and not beside this one's own start)."""
        with self._lock:
            if self._closed:
                raise SandboxError("the Evaluator is closed")
            worker, self._spare = self._spare or self._launch(), None
        try:
            self._starter.await_hello(worker)
        finally:
            if restock:
                self.restock()
        return worker

    def _launch(self) -> WorkerProcess:
        return self._starter.launch("candidate", self._starter.root / f"candidate-{next(self._count):04d}")

    def close(self, at_once: bool = False) -> None:
        with self._lock:
            self._closed = True
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.close(ask=not at_once)


class _WarmReference:
    """The reference worker, kept across candidates. It runs only the trusted reference; it
    is checked before each candidate and replaced after anything abnormal."""

    def __init__(self, starter: _WorkerStarter):
        self._starter = starter
        self._generation = itertools.count()
        self.worker: WorkerProcess | None = None
        self._greeted = False
        self.launch()

    @property
    def pid(self) -> int | None:
        return self.worker.process.pid if self.worker is not None else None

    def launch(self) -> None:
        directory = self._starter.root / f"reference-{next(self._generation)}"
        self.worker, self._greeted = self._starter.launch("reference", directory), False

    def ready(self) -> WorkerProcess:
        """The reference worker, alive and in step with the host (a fresh one otherwise)."""
        if self.worker is not None and self._greeted and not self._in_step(self.worker):
            self.discard()
        if self.worker is None:
            self.launch()
        worker = self.worker
        assert worker is not None  # launch made it
        if not self._greeted:
            try:
                self._starter.await_hello(worker)
            except SandboxError:
                self.worker = None  # closed by await_hello
                raise
            self._greeted = True
        return worker

    def _in_step(self, worker: WorkerProcess) -> bool:
        """Alive, and the next frame it sends is the answer to a ping: nothing stale is
        waiting in its pipe and it is not busy with an earlier request."""
        if worker.process.poll() is not None:
            return False
        token = secrets.randbits(48)
        try:
            worker.send(commands.ping(token))
            reply, _ = worker.receive(time.monotonic() + min(_PING_TIMEOUT_S, self._starter.timeout))
        except (WorkerDied, WorkerTimeout):
            return False
        return isinstance(reply, dict) and reply.get("pong") == token

    def discard(self, at_once: bool = False) -> None:
        if self.worker is not None:
            self.worker.close(ask=not at_once)
        self.worker, self._greeted = None, False


def evaluate(problem: Problem, candidate_source: str, options: EvalOptions | None = None) -> EvalResult:
    """Judge one candidate against the reference. Raises ProblemError when the reference itself
    fails, ValueError for an unusable device, IsolationError for an unusable backend and
    SandboxError when a worker cannot start; every failure of the candidate is a verdict."""
    # No spare: nothing follows this candidate, and a spare's start would compete for the host.
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        return evaluator.evaluate(candidate_source)

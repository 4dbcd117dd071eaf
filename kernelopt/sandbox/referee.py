"""The referee: how one candidate is judged against the reference (`CandidateSession`).

An evaluation uses two sandboxed workers, one hosting the reference and one the candidate, so
the candidate never shares an interpreter with reference outputs, the comparison or the
verdict. The host (this module) picks secret seeds, has the reference worker make the input
sets, hands them to both workers one call at a time, compares what comes back and decides.
See DESIGN.md for the threat model and docs/referee.md for what each step defends.

Phases: startup -> load (the candidate's compile happens here) -> correctness trials (full
outputs, their structure, input digests, input dependence) -> timing (interleaved rounds, the
host's clock around every call, fingerprints of every timed call checked, the speedup from
totals) -> verdict. The first rule broken ends the evaluation with that verdict.

`CandidateSession` is one candidate's evaluation; `kernelopt.sandbox.batch.Evaluator`, the one
entry point (`kernelopt.sandbox.evaluate` is an Evaluator with one candidate), runs sessions,
supplies their workers (a fresh candidate worker each, a warm reference worker) and keeps the
reference's correctness outputs across candidates. This module never imports batch.
"""

from __future__ import annotations

import collections
import math
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import BaseModel, ValidationError

from kernelopt.kernelbench import Problem, ProblemError
from kernelopt.sandbox import builds as builds_module
from kernelopt.sandbox import compare, isolation, labels, nvrtc, profiling, timing
from kernelopt.sandbox.device import default_memory_limit, timing_cpus
from kernelopt.sandbox.process import PLACEMENT_WINDOW_BYTES, WorkerDied, WorkerProcess, WorkerTimeout
from kernelopt.sandbox.results import (
    FLAGS, BuildRecord, Check, Environment, EvalOptions, EvalResult, Isolation, Profile, Timing, TrialResult,
)

INIT_SEED = 42  # KernelBench seeds 42 before get_init_inputs, Model(...) and ModelNew(...)
_ROUND_TARGET_S = 0.05  # aim for rounds of about this long, so interleaving stays fine-grained
_ROUND_WALL_TARGET_S = 0.15  # ... and for this much host time per worker and round, all included
_MAX_CALLS_PER_ROUND = 50
_MIN_ROUNDS = 3  # interleaving: no single round (one slow moment of one side) decides
_ROUND_BYTES = 1 << 30  # inputs generated up front + outputs kept for the sampled comparison
_LOG_EXCERPT = 8000
_SETTLE_S = 30.0  # for the reference to finish a round a candidate's verdict cut short
# How much more CPU time per second of its turn the candidate's worker may use than the
# reference's (one thread each): the clocks' noise, not a second core.
PARALLEL_CPU_TOLERANCE = 0.10
PARALLEL_CPU_SLACK_S = 0.005


class VerdictReached(Exception):
    """Ends an evaluation early with a status (control flow, not an error)."""

    def __init__(self, status: str, message: str, flags: tuple[str, ...] = (), log: str = ""):
        super().__init__(message)
        self.status, self.message, self.flags, self.log = status, message, list(flags), log


class ProblemCodeFailed(VerdictReached):
    """The problem's own code (its import or get_init_inputs) failed in the candidate's worker,
    before any candidate code ran. The reference's load decides whom to blame: when it fails
    too, the problem is broken (ProblemError); otherwise this is the candidate's verdict."""

    def __init__(self, message: str, log: str = ""):
        super().__init__("runtime_error", message, log=log)


class CallRecord(BaseModel):
    """One call of a worker's run, as the worker reports it (untrusted from a candidate)."""

    seed: int
    ms: float
    host_ms: float
    meta: list[tuple[list[int], str, str]]
    structure: str = "T"
    aliases_input: bool
    fingerprints: list[dict] = []
    inputs_before: str | None = None
    inputs_after: str | None = None
    input_bytes: int = 0


class RunReply(BaseModel):
    """A worker's answer to `run`. Validated: a candidate worker's messages are untrusted."""

    calls: list[CallRecord]
    extension_calls: int = 0
    extension_calls_total: int = 0
    builds: list[dict] = []
    changed_settings: list[str] = []
    violations: list[dict] = []


@dataclass
class InputSet:
    """One call's inputs as the reference worker made them: packed bytes the host hands to a
    worker for exactly one call, the spec that unpacks them and the digest of their values."""

    seed: int
    spec: object
    digest: str
    packed: bytes


@dataclass
class ReferenceTrials:
    """The reference's results for the correctness trials' input seeds: what a candidate's
    trials are compared with, and the trials' inputs. An Evaluator keeps them for all its
    candidates (same seeds)."""

    calls: list[CallRecord]
    outputs: list[list[torch.Tensor]]
    inputs: list[InputSet]

    @property
    def nbytes(self) -> int:
        return sum(self.output_bytes(index) + len(self.inputs[index].packed) for index in range(len(self.outputs)))

    def output_bytes(self, index: int) -> int:
        return sum(t.numel() * t.element_size() for t in self.outputs[index])


def _joined(first: ReferenceTrials | None, more: ReferenceTrials | None) -> ReferenceTrials | None:
    """Reference trials run in groups, in order, as one (None: none run)."""
    if first is None or more is None:
        return first or more
    return ReferenceTrials(calls=first.calls + more.calls, outputs=first.outputs + more.outputs,
                           inputs=first.inputs + more.inputs)


@dataclass
class SideRound:
    """One worker's calls in one timed round: its own timer's ms per call, and the host
    clock's ms around each call (the inputs handed over, the call, its output copied out)."""

    timer_ms: list[float]
    host_ms: list[float]
    turn_s: float = 0.0  # the host's clock over the whole turn
    cpu_s: float | None = None  # the worker process's CPU time in it (None: not readable)

    @property
    def overhead_ms(self) -> float:
        """Per call, what the host clock saw beyond the worker's own timer."""
        return (sum(self.host_ms) - sum(self.timer_ms)) / len(self.timer_ms)


@dataclass
class ReferenceRun:
    """How far the reference worker is through a run (header, calls, report), so that when the
    candidate's verdict cuts the run short the reference can be walked through the rest of it
    and stay in step for the next candidate."""

    inputs: list[InputSet]
    flags: dict
    started: bool = False  # the run header sent and "ready" read
    sent: int = 0  # call frames sent
    answered: int = 0  # call replies read
    report: str = ""  # "", "sent", "read"


def per_call_overheads(sides: list[SideRound]) -> list[float]:
    """Per call, the host clock's ms beyond the worker's timer. Calls pair up across the two
    sides (the same round, the same inputs), so their differences compare like with like."""
    return [host - timer for side in sides for host, timer in zip(side.host_ms, side.timer_ms)]


def with_calls(report: dict, records: list[dict]) -> dict:
    """A run's report with the records its calls' answers carried, as _parse_run reads it.
    The records come from the answers, never from the report: by the report, the program
    has had its chances to run again."""
    return {**report, "calls": records}


def load_message(backend: isolation.Backend, device: str, scratch: Path, fingerprint_seed: int, *,
                 host_builds: bool, with_candidate: bool) -> dict:
    """The `load` command: the problem (and the candidate) from the worker's scratch directory,
    the model made from INIT_SEED on the device as the worker sees it."""
    message = {"cmd": "load", "device": isolation.device_inside(backend, device), "init_seed": INIT_SEED,
               "fingerprint_seed": fingerprint_seed, "host_builds": host_builds,
               "problem_path": str(scratch / "problem.py")}
    if with_candidate:
        message["candidate_path"] = str(scratch / "candidate.py")
    return message


def call_message(input_set: InputSet) -> dict:
    """The `call` command: one call's inputs (their bytes travel in the slot or the frame)."""
    return {"cmd": "call", "seed": input_set.seed, "spec": input_set.spec}


def input_sets(problem: Problem, seeds: list[int], reply: dict, blobs: list[bytes]) -> list[InputSet]:
    """The reference worker's answer to `inputs` for `seeds`, one InputSet per seed."""
    sets = reply.get("sets")
    if not isinstance(sets, list) or len(sets) != len(seeds) or len(blobs) != len(seeds):
        raise ProblemError(problem.path, "the reference worker sent too few input sets")
    return [InputSet(seed=seed, spec=meta.get("spec"), digest=str(meta.get("digest")), packed=blob)
            for seed, meta, blob in zip(seeds, sets, blobs)]


def _known_flag(name) -> str:
    return name if name in FLAGS else "violation"


def _structure_words(structure: str) -> str:
    return structure if len(structure) <= 60 else structure[:57] + "..."


class CandidateSession:
    """One candidate's evaluation. `prepare` (its worker, its load and compile) may run ahead
    in a thread of the Evaluator's; `judge` (correctness, timing) runs with the device to
    itself. The session owns its candidate worker; the reference worker is the Evaluator's."""

    def __init__(self, problem: Problem, source: str, options: EvalOptions, device: str,
                 backend: isolation.Backend, *, serial: int, take_worker: Callable[[], WorkerProcess],
                 seed_source, fingerprint_seed: int, trial_seeds: list[int]):
        self.problem, self.source, self.options = problem, source, options
        self.serial = serial
        self._take_worker = take_worker
        self.device, self.backend = device, backend
        self.memory_limit = options.memory_limit or default_memory_limit()
        self.started = time.monotonic()
        self.deadline = self.started + options.timeout
        self.durations: dict[str, float] = {}
        self.checks: list[Check] = []
        self.flags: list[str] = []
        self.trials: list[TrialResult] = []
        self.timing: Timing | None = None
        self.environment: dict | None = None
        self.labels_source: dict = {}
        self.reduced_precision = False
        self.sampled_checks = 0
        self.bytes_per_call = 1  # inputs + outputs of one call, known after the correctness trials
        self._seed_source = seed_source  # this candidate's timing inputs and sampled calls
        self.fingerprint_seed, self.trial_seeds = fingerprint_seed, trial_seeds
        self.expected: ReferenceTrials | None = None  # the reference's trial results
        self.candidate_load: dict = {}
        self.problem_code_failed: ProblemCodeFailed | None = None
        self.workdir: Path | None = None  # the candidate worker's directory, once taken
        self.aborted = False
        self._paused_at: float | None = None
        self.builds = build_service(options, backend)
        self.kernel_compiles = nvrtc.NvrtcService(self.builds.cache, backend) if self.builds else None
        self.build_records: list[BuildRecord] = []
        self.candidate = self.reference = None
        self.timing_cpus = timing_cpus(options, device)
        self.input_dependence = compare.InputDependence(options)
        # The reference's part of the profiling pass, kept by the Evaluator across candidates;
        # reference_profiled: this session ran the pass in the reference worker.
        self.reference_profile: profiling.ReferenceProfile | None = None
        self.reference_profiled = False

    # -- the phases -------------------------------------------------------------------------

    def prepare(self) -> EvalResult | None:
        """Take a started candidate worker and load the candidate (its compile happens here).
        Returns the verdict when one is reached here (compile error, crash, timeout), else
        None: the candidate waits, its clock stopped, for `judge`."""
        self.started = time.monotonic()
        self.deadline = self.started + self.options.timeout
        verdict = self._stage(("startup", self._take_candidate_worker), ("load", self._load_candidate))
        self._paused_at = time.monotonic()
        return verdict

    def judge(self, reference_ready: Callable[[], WorkerProcess], expected: ReferenceTrials | None) -> EvalResult:
        """Correctness and timing against the reference worker `reference_ready()` returns;
        `expected`: the reference's trial results when the Evaluator kept them."""
        self.expected = expected
        begin = time.monotonic()
        self.reference = reference_ready()
        self._add_duration("startup", time.monotonic() - begin)
        self._resume_clock(queued=begin - self._paused_at)
        verdict = self._stage(("load", self._load_reference), ("correctness", self._check_correctness),
                              ("timing", self._measure))
        if verdict is not None:
            return verdict
        result = self._result("correct", self._correct_message())
        if self.options.profile:
            begin = time.monotonic()
            result.profile = self._profile_pass()
            result.durations["profile"] = round(time.monotonic() - begin, 4)
        return result

    def _profile_pass(self) -> Profile:
        """After a correct verdict, outside the timed calls: one advisory profiling pass in each
        side's own worker on one input set the reference made (sandbox/profiling.py). Nothing
        of the verdict comes from it; whatever fails in it is a note."""
        begin, notes = time.monotonic(), []
        try:
            kept = self.reference_profile
            if kept is None:
                self.reference_profiled = True  # the Evaluator replaces a worker the profiler ran in
                input_set = self._make_inputs([self._new_seed()])[0]
                kept = profiling.ReferenceProfile(input_set, None)
                kept.reply = self._ask_profile(self.reference, input_set, True, kept.notes)
                self.reference_profile = kept
            reply = self._ask_profile(self.candidate, kept.input_set, False, notes)
        except Exception as exc:  # noqa: BLE001 - advisory: the verdict stands
            return Profile(device=self.device, notes=[f"not profiled: {type(exc).__name__}: {str(exc)[:300]}"],
                           seconds=round(time.monotonic() - begin, 4))
        device_name = (self.environment or {}).get("device_name")
        return profiling.assemble(self.device, kept, reply, self.timing, device_name, notes, time.monotonic() - begin)

    def _ask_profile(self, worker: WorkerProcess, input_set: InputSet, count_work: bool,
                     notes: list[str]) -> dict | None:
        """One side's `profile` reply, or None with a note (its failure, death or silence)."""
        deadline = time.monotonic() + profiling.side_limit(self.device, self.timing)
        try:
            worker.send_inputs({**call_message(input_set), **profiling.message(count_work, self.device)},
                               input_set.packed, deadline)
            reply, _ = worker.receive(deadline)
        except (WorkerDied, WorkerTimeout) as exc:
            notes.append(f"{worker.role} not profiled: {exc}")
            return None
        if not isinstance(reply, dict) or not reply.get("ok"):
            error = str(reply.get("error", reply)) if isinstance(reply, dict) else "a malformed reply"
            notes.append(f"{worker.role} not profiled: {(error.strip().splitlines() or [''])[0][:300]}")
            return None
        return reply

    def _stage(self, *phases) -> EvalResult | None:
        """Run phases in order; the first rule broken becomes the result."""
        try:
            for name, step in phases:
                self._phase(name, step)
        except VerdictReached as verdict:
            return self._result(verdict.status, verdict.message, verdict.flags, verdict.log)
        except WorkerTimeout as exc:
            return self._result("timeout", f"{exc} (limit {self.options.timeout:g} s)")
        except WorkerDied as exc:
            if exc.memory_exceeded:
                return self._result("rejected", str(exc), ["memory_limit"])
            return self._result("runtime_error", str(exc))
        return None

    def _phase(self, name: str, step) -> None:
        begin = time.monotonic()
        try:
            step()
        finally:
            self._add_duration(name, time.monotonic() - begin)

    def _add_duration(self, name: str, seconds: float) -> None:
        self.durations[name] = round(self.durations.get(name, 0.0) + seconds, 4)

    def _resume_clock(self, queued: float) -> None:
        """Time the loaded candidate waited for the device, and for the reference worker, is
        not the candidate's: its timeout counts only its own phases, its total only its own
        phases and startup."""
        self.deadline += time.monotonic() - self._paused_at
        self.started += queued
        if queued >= 0.01:
            self.durations["waiting"] = round(queued, 4)

    def _take_candidate_worker(self) -> None:
        self.candidate = self._take_worker()
        self.workdir = self.candidate.scratch.parent
        if self.aborted:  # abort() ran while the worker was being taken
            self.candidate.kill()

    def abort(self) -> None:
        """Called from another thread: end a `prepare` in progress (its waits end when its
        worker is killed)."""
        self.aborted = True
        if self.candidate is not None:
            self.candidate.kill()

    @property
    def candidate_pid(self) -> int | None:
        return self.candidate.process.pid if self.candidate is not None else None

    @property
    def reference_pid(self) -> int | None:
        return self.reference.process.pid if self.reference is not None else None

    def _load_message(self, scratch: Path, with_candidate: bool) -> dict:
        return load_message(self.backend, self.device, scratch, self.fingerprint_seed,
                            host_builds=self.builds is not None, with_candidate=with_candidate)

    def _load_candidate(self) -> None:
        scratch = self.candidate.scratch
        (scratch / "candidate.py").write_text(self.source)
        try:
            self.candidate_load, _ = self._ask(self.candidate, self._load_message(scratch, with_candidate=True))
        except ProblemCodeFailed as failure:
            self.problem_code_failed = failure  # judged once the reference has loaded
            return
        except WorkerDied as exc:  # the problem's own import (os._exit) may have killed it: the same rule
            if exc.memory_exceeded:
                raise
            self.problem_code_failed = ProblemCodeFailed(str(exc))
            return
        self._remember_labels(self.candidate_load)
        self._raise_violations(self.candidate_load.get("violations", []))

    def _load_reference(self) -> None:
        """Load the reference again (a fresh model from the init seed, as the candidate's) and
        compare the two loads."""
        ref, _ = self._ask(self.reference, self._load_message(self.reference.scratch, with_candidate=False))
        if self.problem_code_failed is not None:
            raise self.problem_code_failed
        self.environment = ref.get("environment")
        self._check_sandbox_census()
        if self.candidate_load.get("init_digest") != ref.get("init_digest"):
            raise VerdictReached("rejected", "the candidate changed the problem's init inputs", ("inputs_differ",))
        self.checks.append(Check(name="load", passed=True, detail="reference and candidate loaded"))

    def _check_correctness(self) -> None:
        fresh = None  # the reference's results, when they are not known yet: kept once all ran
        for group in self._trial_groups():
            fresh = _joined(fresh, self._run_trials(group))
        if fresh is not None:
            self.expected = fresh
        failed = [t for t in self.trials if not t.passed]
        self.checks.append(Check(name="correctness", passed=not failed,
                                 detail=f"{len(self.trials) - len(failed)}/{len(self.trials)} trials passed"))
        if failed:
            raise VerdictReached("incorrect", f"trial {failed[0].index}: {failed[0].message}")
        ignored = self.input_dependence.verdict()
        self.checks.append(Check(name="output_follows_input", passed=ignored is None, detail=ignored or ""))
        if ignored:
            raise VerdictReached("incorrect", ignored, ("output_ignores_input",))
        self._judge_precision()

    def _trial_groups(self):
        """The trials' indices in groups whose inputs and outputs fit in _ROUND_BYTES at once.
        The host holds a group's inputs and outputs while comparing: on KernelBench's largest
        problems (6 GB inputs and outputs) five trials at once would need 64 GB, on one GPU
        with the reference's. The sizes come from the kept reference trials, else from the
        first trial, run alone."""
        count, start = len(self.trial_seeds), 0
        while start < count:
            if self.expected is None and start == 0:
                size = 1
            else:
                size = max(1, _ROUND_BYTES // max(self.bytes_per_call, self._expected_bytes_per_call()))
            yield list(range(start, min(count, start + size)))
            start += size

    def _expected_bytes_per_call(self) -> int:
        expected = self.expected
        if expected is None:
            return 1
        return max(call.input_bytes + expected.output_bytes(i) for i, call in enumerate(expected.calls))

    def _run_trials(self, indices: list[int]) -> ReferenceTrials | None:
        """Correctness trials `indices`, run in both workers in parallel on inputs the
        reference made, compared on the host. Returns the reference's results for them when
        they were not known (None otherwise)."""
        seeds = [self.trial_seeds[i] for i in indices]
        known = self.expected is not None
        inputs = [self.expected.inputs[i] for i in indices] if known else self._make_inputs(seeds)
        # The candidate's trial outputs are compared in full here, so it skips fingerprinting
        # them. The reference's outputs for known seeds are kept: it still runs the same calls
        # (fingerprints only), so that when timing starts it has made the same calls as the
        # candidate (a stateful reference stays comparable), and its fingerprints check that
        # it reproduces the kept outputs.
        cand_run = {"hash_inputs": True, "return_outputs": True, "fingerprints": False}
        ref_run = {"hash_inputs": True} if known else {"hash_inputs": True, "return_outputs": True}
        outputs, reports = self._run_side_by_side(inputs, cand_run, ref_run)
        ref = self._parse_run(reports[self.reference], seeds, trusted=True)
        cand = self._parse_run(reports[self.candidate], seeds)
        fresh = None
        if known:
            self._check_replay(ref, indices)
            expected = ReferenceTrials(calls=[self.expected.calls[i] for i in indices],
                                       outputs=[self.expected.outputs[i] for i in indices], inputs=inputs)
        else:
            fresh = expected = self._reference_trials(ref, outputs[self.reference], inputs)
        self._raise_violations(cand.violations)
        self._check_sandbox_census()
        for position, (c, r) in enumerate(zip(cand.calls, expected.calls)):
            self._check_call_invariants(c, r)
            self._check_inputs(c, inputs[position], r)
            try:
                out = compare.load_tensors(outputs[self.candidate][position])
            except compare.BadOutputBlob as exc:
                raise VerdictReached("rejected", f"candidate outputs unusable: {exc}", ("protocol_violation",))
            comparison = compare.compare_outputs(out, expected.outputs[position], self.options)
            self.reduced_precision |= comparison.reduced_precision
            self.trials.append(compare.trial_result(indices[position], seeds[position], comparison))
            if comparison.passed:
                self.input_dependence.add(out, expected.outputs[position])
            self.bytes_per_call = max(self.bytes_per_call, r.input_bytes + expected.output_bytes(position))
        return fresh

    def _run_side_by_side(self, inputs: list[InputSet], cand_run: dict, ref_run: dict) -> dict:
        """Both workers take the same calls in parallel (the reference's reply read first: its
        failure is the problem's), then report (the reference's report read first). Returns
        each worker's output blobs per call (empty when it was not asked for them) and
        their reports."""
        run = ReferenceRun(inputs, ref_run)
        try:
            self._start_reference(run)
            self._start_run(self.candidate, len(inputs), cand_run)
            outputs = {self.reference: [], self.candidate: []}
            records = {self.reference: [], self.candidate: []}
            for input_set in inputs:
                self._send_call(self.reference, input_set)
                run.sent += 1
                self._send_call(self.candidate, input_set)
                for worker, flags in ((self.reference, ref_run), (self.candidate, cand_run)):
                    record, blobs = self._call_reply(worker, flags)
                    records[worker].append(record)
                    outputs[worker] += blobs
                    run.answered += worker is self.reference
                self._check_sandbox_census()  # after every call (see _timed_calls)
            reports = {self.reference: self._report_reference(run), self.candidate: self._report(self.candidate)}
        except (VerdictReached, WorkerDied, WorkerTimeout):  # the candidate's end (the reference's is ProblemError)
            self._settle_reference(run)
            raise
        return outputs, {worker: with_calls(reports[worker], records[worker]) for worker in reports}

    def _start_reference(self, run: ReferenceRun) -> None:
        self._start_run(self.reference, len(run.inputs), run.flags)
        run.started = True

    def _report_reference(self, run: ReferenceRun) -> dict:
        self._send(self.reference, {"cmd": "report"})
        run.report = "sent"
        reply = self._receive(self.reference)[0]
        run.report = "read"
        return reply

    def _call_reply(self, worker: WorkerProcess, flags: dict) -> tuple[dict, list[bytes]]:
        """A worker's answer to one call: its record, and its output blob when the run
        returns outputs."""
        reply, blobs = self._receive(worker, with_blobs=True)
        record = self._call_record(worker, reply)
        if not flags.get("return_outputs"):
            return record, []
        if len(blobs) != 1:
            self._protocol_error(worker, "one output blob per call")
        return record, blobs

    def _call_record(self, worker: WorkerProcess, reply: dict) -> dict:
        """The record a call's answer carries (validated with the run's report: _parse_run)."""
        if reply.get("called") is None or not isinstance(reply.get("record"), dict):
            self._protocol_error(worker, "called, with the call's record")
        return reply["record"]

    def _make_inputs(self, seeds: list[int]) -> list[InputSet]:
        """Input sets made by the reference worker (trusted code only) for the host's seeds."""
        reply, blobs = self._ask(self.reference, {"cmd": "inputs", "seeds": seeds})
        return input_sets(self.problem, seeds, reply, blobs)

    def _start_run(self, worker: WorkerProcess, count: int, flags: dict) -> None:
        self._send(worker, {"cmd": "run", "count": count, **flags})
        self._expect(worker, "ready")

    def _send_call(self, worker: WorkerProcess, input_set: InputSet, at: int = 0) -> None:
        try:
            worker.send_inputs(call_message(input_set), input_set.packed, self.deadline, at)
        except (WorkerDied, WorkerTimeout) as exc:
            raise self._attribute(worker, exc) from None

    def _report(self, worker: WorkerProcess) -> dict:
        self._send(worker, {"cmd": "report"})
        return self._receive(worker)[0]

    def _reference_trials(self, ref: RunReply, blobs: list[bytes], inputs: list[InputSet]) -> ReferenceTrials:
        try:
            outputs = [compare.load_tensors(blob) for blob in blobs]
        except compare.BadOutputBlob as exc:
            raise ProblemError(self.problem.path, f"the reference worker sent unusable outputs: {exc}") from None
        if len(outputs) != len(inputs):
            raise ProblemError(self.problem.path, "the reference worker sent outputs for too few trials")
        return ReferenceTrials(calls=ref.calls, outputs=outputs, inputs=inputs)

    def _check_replay(self, replay: RunReply, indices: list[int]) -> None:
        """The re-loaded reference must reproduce the outputs kept from its first run."""
        for index, now in zip(indices, replay.calls):
            kept = self.expected.calls[index]
            meta = [list(m) for m in kept.meta]
            mismatch = ("shapes or dtypes differ" if now.meta != kept.meta else
                        compare.compare_fingerprints(now.fingerprints, kept.fingerprints, meta, self.options))
            if mismatch:
                raise ProblemError(self.problem.path, "the reference is not reproducible: loaded again from the "
                                   f"same seeds it gave other outputs for correctness trial {index} ({mismatch})")

    def _measure(self) -> None:
        stats = self._timing_phase()
        speedups = [stats.reference_ms / stats.candidate_ms]
        if speedups[0] > self.options.outlier_speedup:
            again = self._timing_phase()
            speedups.append(again.reference_ms / again.candidate_ms)
            if speedups[1] < speedups[0]:
                stats = again
            stats.remeasured = True
        stats.speedups_measured = [round(s, 6) for s in speedups]
        self.timing = stats

    # -- timing -----------------------------------------------------------------------------

    def _timing_phase(self) -> Timing:
        """Interleaved rounds until the speedup is known precisely enough, the call cap or
        the time budget."""
        begin = time.monotonic()
        warm = self._timed_round(self.options.warmup_calls, 0)
        harness_s = (time.monotonic() - begin) / (2 * self.options.warmup_calls)  # per call, all included
        slowest_s = max(statistics.fmean(side.timer_ms) for side in warm) / 1e3
        per_round = max(1, min(_MAX_CALLS_PER_ROUND, int(_ROUND_TARGET_S / max(slowest_s, 1e-6)),
                               int(_ROUND_WALL_TARGET_S / max(harness_s, 1e-6)),
                               _ROUND_BYTES // self.bytes_per_call))
        # One discarded round of the measured size: allocator and caches reach the state the
        # measured rounds will see (the first round of a fresh process is often much slower).
        self._timed_round(per_round, 1)
        round_s = per_round * harness_s * 2
        rounds = self._measured_rounds(per_round, round_s)
        slack_c, _, allowance = self._overheads(rounds)
        if (slack_c > allowance
                and time.monotonic() + _MIN_ROUNDS * round_s < self.deadline - 1.0):
            # A gross gap must show again in a fresh measurement: a busy host can preempt an
            # honest worker during its calls, while forged timings or work hidden from the
            # timer show every time. Only the fresh measurement is kept, so behaving well in
            # it alone gains nothing.
            rounds = self._measured_rounds(per_round, round_s)
        self._check_wall_clock(rounds)
        return self._timing_result(rounds, per_round)

    def _timing_result(self, rounds: list[tuple[SideRound, SideRound]], per_round: int) -> Timing:
        """The speedup from each side's total time over all timed calls (its mean per call),
        never from a statistic one call can move; its interval from the rounds and the spread
        between worker processes (timing.calibrated_precision). The precision stop looks at
        the rounds' part alone: more rounds cannot shrink the other. Which clock each side's
        time comes from: `_side_means`."""
        cand = [c for c, _ in rounds]
        ref = [r for _, r in rounds]
        cand_means, ref_means, method = self._side_means(cand, ref)
        cand_stats = timing.summarize([ms for side in cand for ms in side.timer_ms])
        ref_stats = timing.summarize([ms for side in ref for ms in side.timer_ms])
        cand_ms, ref_ms = statistics.fmean(cand_means), statistics.fmean(ref_means)
        slack_c, slack_r, _ = self._overheads(rounds)
        return Timing(method=method, reference=ref_stats, candidate=cand_stats, rounds=len(rounds),
                      calls_per_round=per_round, reference_ms=ref_ms, candidate_ms=cand_ms,
                      candidate_host_bound_ms=cand_stats.mean_ms + slack_c - slack_r,
                      wall_speedup=(ref_stats.mean_ms + slack_r) / (cand_stats.mean_ms + slack_c),
                      speedup_precision=timing.calibrated_precision(timing.ratio_precision(ref_means, cand_means),
                                                                    self.device),
                      reference_overhead_ms=slack_r, candidate_overhead_ms=slack_c,
                      reference_charge_ms=ref_ms - ref_stats.mean_ms,
                      candidate_charge_ms=cand_ms - cand_stats.mean_ms)

    def _side_means(self, cand: list[SideRound], ref: list[SideRound]) -> tuple[list[float], list[float], str]:
        """Each side's mean ms per call, round by round, and how they were measured.

        Each worker's timer measures its calls (host perf_counter on a CPU; CUDA events after a
        device-wide synchronisation on a GPU), and the host's clock around every call checks
        it: per call, the time the host saw beyond the timer is the same harness work on both
        sides (handing over the inputs, copying the output), so the part of one side's
        overhead that exceeds the other's by more than the noise of the paired calls (work
        hidden from the timer, forged timings) is added to that side's time, less the few per
        cent by which two processes running the same code differ (timing.charge). The rule is
        the same for both sides, and noise charges no one."""
        cand_over, ref_over = per_call_overheads(cand), per_call_overheads(ref)
        cand_charge, ref_charge = timing.charge(cand_over, ref_over), timing.charge(ref_over, cand_over)
        clock = ("cuda events + device-wide synchronize, L2 flushed before each call" if self.device.startswith("cuda")
                 else "host perf_counter per call")
        return ([statistics.fmean(c.timer_ms) + cand_charge for c in cand],
                [statistics.fmean(r.timer_ms) + ref_charge for r in ref],
                clock + "; the host clock around every call charges overhead beyond the other side's")

    def _measured_rounds(self, per_round: int, round_s: float) -> list[tuple[SideRound, SideRound]]:
        """Measured rounds (each expected to take `round_s`) until _timing_done: each round's
        (candidate, reference) calls."""
        rounds = []
        budget_end = time.monotonic() + self.options.timing_budget
        while True:
            # Alternate which worker goes first, and the core both run their calls on.
            rounds.append(self._timed_round(per_round, len(rounds)))
            if self._timing_done(rounds, budget_end, round_s):
                return rounds

    def _timing_done(self, rounds, budget_end: float, round_s: float) -> bool:
        options = self.options
        if time.monotonic() + round_s > self.deadline - 1.0:
            return True
        calls = sum(len(c.timer_ms) for c, _ in rounds)
        if calls >= options.max_timed_calls and len(rounds) >= _MIN_ROUNDS:
            return True
        if calls < options.min_timed_calls or len(rounds) < _MIN_ROUNDS:
            return False
        cand_means, ref_means, _ = self._side_means([c for c, _ in rounds], [r for _, r in rounds])
        precise = timing.ratio_precision(ref_means, cand_means) <= options.target_precision
        out_of_time = time.monotonic() + round_s > min(budget_end, self.deadline - 1.0)
        return precise or out_of_time

    def _timed_round(self, calls: int, number: int) -> tuple[SideRound, SideRound]:
        """One round of `calls` timed calls per side: each worker takes them with the host to
        itself (the candidate first in even rounds, the reference in odd ones), the host's
        clock around every call (each answer bringing the call's record and fingerprints), and
        the other worker's sandbox stopped (SIGSTOP) meanwhile; then both report. Every
        call's inputs are handed over only as that call starts. Each worker's loop begins with
        one more call, on inputs of its own, that is checked but not timed: after the other
        worker's turn, a process's caches are cold, and how fast each warms up is a trait of
        the process that would otherwise tilt every round of an evaluation the same way.
        Returns the (candidate, reference) sides."""
        inputs = self._make_inputs(self._new_seeds(calls + 1))
        run = {"retain": True, "pin_cpu": self._timing_cpu(number)}
        first, second = (self.candidate, self.reference) if number % 2 == 0 else (self.reference, self.candidate)
        at = self._placement(inputs)
        ref_run = ReferenceRun(inputs, run)
        sides, records, replies = {}, {}, {}
        try:
            for worker in (first, second):
                idle = self.candidate if worker is self.reference else self.reference
                idle.freeze()  # nothing of the idle side runs during the other's turn
                try:
                    if worker is self.reference:
                        self._start_reference(ref_run)
                    else:
                        self._start_run(worker, len(inputs), run)
                    sides[worker], records[worker] = self._timed_calls(worker, inputs, at, ref_run)
                finally:
                    idle.thaw()
            self._send(self.reference, {"cmd": "report"})
            ref_run.report = "sent"
            self._send(self.candidate, {"cmd": "report"})
            replies[self.reference] = self._receive(self.reference)[0]
            ref_run.report = "read"
            replies[self.candidate] = self._receive(self.candidate)[0]
        except (VerdictReached, WorkerDied, WorkerTimeout):  # the candidate's end (the reference's is ProblemError)
            self._settle_reference(ref_run)
            raise
        seeds = [s.seed for s in inputs]
        cand = self._parse_run(with_calls(replies[self.candidate], records[self.candidate]), seeds)
        ref = self._parse_run(with_calls(replies[self.reference], records[self.reference]), seeds, trusted=True)
        self._raise_violations(cand.violations)
        self._check_sandbox_census()
        self._check_parallelism(sides[self.candidate], sides[self.reference])
        for c, r in zip(cand.calls, ref.calls):
            self._check_call_invariants(c, r)
            mismatch = compare.compare_fingerprints(c.fingerprints, r.fingerprints, [list(m) for m in r.meta],
                                                    self.options)
            if mismatch:
                raise VerdictReached("incorrect", f"a timed call's output does not match the reference ({mismatch}): "
                                           "correct when checked, wrong when timed", ("inconsistent_outputs",))
        self._compare_sampled_call(len(inputs))
        self._remember_labels(replies[self.candidate])
        for side, reply in ((sides[self.candidate], cand), (sides[self.reference], ref)):
            side.timer_ms = [c.ms for c in reply.calls[1:]]  # the loop's warm-up call is not timed
            side.host_ms = side.host_ms[1:]
        return sides[self.candidate], sides[self.reference]

    def _placement(self, inputs: list[InputSet]) -> int:
        """Where in the input slot this round's inputs lie: a random page of the placement
        window and a random 64-byte step within it, the same for both sides of the round. The
        pages an input occupies, and its alignment against the output's, would otherwise hold
        for a whole evaluation, and with them its cache conflicts: a memory-bound CPU kernel
        measured 0.8x-1.6x against exact copies of itself, each evaluation sure of its own."""
        largest = max(len(s.packed) for s in inputs)
        pages = (PLACEMENT_WINDOW_BYTES - largest - 4096) // 4096
        if pages <= 0:
            return 0
        return self._seed_source.randrange(pages) * 4096 + self._seed_source.randrange(64) * 64

    def _timed_calls(self, worker: WorkerProcess, inputs: list[InputSet], at: int,
                     ref_run: ReferenceRun) -> tuple[SideRound, list[dict]]:
        """The worker's calls of a round, one at a time, each bracketed by the host's clock
        from handing over its inputs to its answer (the output copied out and fingerprinted,
        the call's record). Returns the host's times and the calls' records."""
        host_ms, records = [], []
        reference = worker is self.reference
        cpu_before, turn_begin = worker.cpu_seconds(), time.perf_counter()
        for input_set in inputs:
            begin = time.perf_counter()
            self._send_call(worker, input_set, at)
            ref_run.sent += reference
            reply, _ = self._receive(worker)
            host_ms.append((time.perf_counter() - begin) * 1e3)
            ref_run.answered += reference
            records.append(self._call_record(worker, reply))
        turn_s, cpu_after = time.perf_counter() - turn_begin, worker.cpu_seconds()
        cpu_s = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
        if not reference:
            # As the candidate's turn ends, not only at the round's report: a thread or process
            # its calls left running could slow the reference's turn on the shared core and be
            # gone by the report; to do so it must be alive now. Not after every call: reading
            # the candidate's /proc entries between its calls slowed it by 4 % (an exact copy
            # of a 40 us kernel measured 0.96x).
            self._check_sandbox_census()
        return SideRound(timer_ms=[], host_ms=host_ms, turn_s=turn_s, cpu_s=cpu_s), records

    def _timing_cpu(self, number: int) -> int | None:
        """The core both workers' calls of round `number` run on: the same for both sides of
        a round, and changing from round to round, so a difference between cores is neither
        one side's advantage nor held fixed for a whole evaluation."""
        if self.timing_cpus is None:
            return None
        return self.timing_cpus[number % len(self.timing_cpus)]

    def _settle_reference(self, run: ReferenceRun) -> None:
        """The candidate's verdict cut a run short: the warm reference worker takes the steps
        it still had (its run header, the calls it was not given or whose answers were not
        read, its report), so it is back in step with the host for the next candidate. When
        that fails, the Evaluator's check before the next candidate replaces it."""
        deadline = time.monotonic() + _SETTLE_S
        reference = self.reference
        try:
            if not run.started:
                reference.send({"cmd": "run", "count": len(run.inputs), **run.flags}, deadline=deadline)
                reference.receive(deadline)
            for _ in range(run.sent - run.answered):
                reference.receive(deadline)
            for input_set in run.inputs[run.sent:]:
                reference.send_inputs({"cmd": "call", "seed": input_set.seed, "spec": input_set.spec},
                                      input_set.packed, deadline)
                reference.receive(deadline)
            if not run.report:
                reference.send({"cmd": "report"}, deadline=deadline)
            if run.report != "read":
                reference.receive(deadline)
        except (WorkerDied, WorkerTimeout):
            pass

    def _expect(self, worker: WorkerProcess, key: str) -> None:
        reply, _ = self._receive(worker)
        if reply.get(key) is not True:
            self._protocol_error(worker, key)

    def _protocol_error(self, worker: WorkerProcess, expected: str):
        if worker is self.reference:
            raise ProblemError(self.problem.path, f"reference worker protocol error: expected {expected}")
        raise VerdictReached("rejected", f"the candidate worker broke the protocol (expected {expected})",
                      ("protocol_violation",))

    def _check_sandbox_census(self) -> None:
        """Host-side view of the candidate's sandbox, which code inside it cannot falsify."""
        extra = self.candidate.extra_processes()
        if extra > 0:
            raise VerdictReached("rejected", f"the candidate left {extra} process(es) running in its sandbox",
                          ("child_processes",))
        threads = self.candidate.thread_growth() - self.reference.thread_growth()
        if threads > 0:
            self._more_threads_than_reference(lambda: self._thread_message(threads))

    def _more_threads_than_reference(self, message: Callable[[], str]) -> None:
        """The candidate ran threads beyond the reference's: flagged, and rejected on a CPU,
        where each side gets one thread (on CUDA the driver starts threads of its own, lazily,
        and they work beside the calls)."""
        if "native_threads" not in self.flags:
            self.flags.append("native_threads")
        if not self.device.startswith("cuda"):
            raise VerdictReached("rejected", message(), ("native_threads",))

    def _check_parallelism(self, cand: SideRound, ref: SideRound) -> None:
        """Each side of a round runs its calls on one core. A thread that the candidate starts
        and joins within a call leaves nothing for a census to see, but the CPU time it used
        stays in the process's CPU clock: a turn that used more CPU time per second of wall
        time than the reference's turn (beyond noise) ran work on several cores at once."""
        if cand.cpu_s is None or ref.cpu_s is None or cand.turn_s <= 0 or ref.turn_s <= 0:
            return
        allowed = cand.turn_s * max(1.0, ref.cpu_s / ref.turn_s) * (1 + PARALLEL_CPU_TOLERANCE) \
            + PARALLEL_CPU_SLACK_S
        if cand.cpu_s > allowed:
            self._more_threads_than_reference(lambda: (
                f"the candidate's worker used {cand.cpu_s * 1e3:.1f} ms of CPU time in a turn of "
                f"{cand.turn_s * 1e3:.1f} ms: its calls ran work on more than one core at once (threads "
                "started and joined within a call leave no thread behind, but their CPU time counts). "
                "Evaluations run each side on one CPU thread, so that a speedup compares kernels; do the "
                "work in the calling thread"))

    def _thread_message(self, threads: int) -> str:
        """Why extra threads are refused, in terms of what the candidate did. Each side gets one
        CPU thread (OMP_NUM_THREADS=1 for both workers), so that a speedup compares kernels,
        not how many cores each side took from a shared machine (docs/referee.md)."""
        extra = collections.Counter(self.candidate.thread_names()) - collections.Counter(
            self.reference.thread_names())
        names = ", ".join(sorted(extra)) or "unnamed"
        pool = self.labels_source.get("torch_threads")
        if isinstance(pool, int) and pool > 1:
            return (f"the candidate raised torch's CPU thread pool to {pool} threads (torch.set_num_threads), "
                    f"leaving {threads} more thread(s) than the reference's: evaluations run each side on one "
                    "CPU thread; remove the call, or set it to 1")
        return (f"the candidate left {threads} more thread(s) running than the reference worker after its calls "
                f"returned (thread names: {names}): evaluations run each side on one CPU thread, and work on other "
                "threads would escape the timing; do the work in the calling thread and stop any thread it starts")

    def _compare_sampled_call(self, count: int) -> None:
        """Compare in full one timed call, chosen only after the round ran, so a candidate
        cannot know which of its timed outputs will be checked element by element."""
        index = self._seed_source.randrange(count)
        fetch = {"cmd": "fetch", "index": index}
        _, blobs = self._ask_both({self.candidate: fetch, self.reference: fetch}, with_blobs=True)
        outputs = {}
        for worker in (self.candidate, self.reference):
            try:
                outputs[worker] = compare.load_tensors(blobs[worker][0])
            except (compare.BadOutputBlob, IndexError) as exc:
                raise VerdictReached("rejected", f"candidate outputs unusable: {exc}", ("protocol_violation",))
        comparison = compare.compare_outputs(outputs[self.candidate], outputs[self.reference], self.options)
        self.sampled_checks += 1
        if not comparison.passed:
            raise VerdictReached("incorrect", f"a timed call's output does not match the reference "
                                       f"({comparison.message}): correct when checked, wrong when timed",
                          ("inconsistent_outputs",))

    @staticmethod
    def _overheads(rounds) -> tuple[float, float, float]:
        """Per call: the candidate's overhead (host time beyond its timer), the reference's, and
        the most the candidate's may be. Small gaps are noise or small forgeries, which the
        speedup charges where they are more than noise (see _side_means); only a gross gap is
        rejected outright."""
        cand_ms = statistics.fmean(ms for c, _ in rounds for ms in c.timer_ms)
        slack_c = statistics.fmean(c.overhead_ms for c, _ in rounds)
        slack_r = statistics.fmean(r.overhead_ms for _, r in rounds)
        return slack_c, slack_r, 3 * slack_r + 1.0 + 0.5 * cand_ms

    def _check_wall_clock(self, rounds) -> None:
        """The host's clock brackets each call. Per call, the time its own timer does not
        account for (handing over the inputs, copying the output) is the same harness work in
        both workers; a candidate whose timer under-reports (forged timings) or that does work
        outside its timed region shows a larger gap than the reference."""
        slack_c, slack_r, allowance = self._overheads(rounds)
        passed = slack_c <= allowance
        self.checks.append(Check(name="wall_clock_consistency", passed=passed,
                                 detail=f"per-call time outside the timer: candidate {slack_c:.3f} ms, "
                                        f"reference {slack_r:.3f} ms (allowed {allowance:.3f} ms)"))
        if not passed:
            raise VerdictReached("rejected", f"the host clock saw {slack_c - slack_r:.3f} ms per call more around the "
                                      "candidate's calls than its timer reported (work hidden from the timer, "
                                      "or forged timings)", ("timing_inconsistent",))

    # -- invariants -------------------------------------------------------------------------

    def _check_call_invariants(self, c: CallRecord, r: CallRecord) -> None:
        if c.aliases_input:
            raise VerdictReached("rejected", "an output shares memory with an input", ("output_aliases_input",))
        if c.structure != r.structure:
            raise VerdictReached("incorrect", f"the output's structure {_structure_words(c.structure)} differs from "
                                       f"the reference's {_structure_words(r.structure)} (T: a tensor, (...): a "
                                       "tuple, [...]: a list)")
        if len(c.meta) != len(r.meta):
            raise VerdictReached("incorrect", f"returned {len(c.meta)} tensor(s), expected {len(r.meta)}")
        for index, (cm, rm) in enumerate(zip(c.meta, r.meta)):
            if tuple(cm) != tuple(rm):
                raise VerdictReached("incorrect", f"output {index}: shape/dtype/device {list(cm)} != expected {list(rm)}")

    def _check_inputs(self, c: CallRecord, given: InputSet, r: CallRecord) -> None:
        """The candidate's worker must have received exactly the inputs the reference made, and
        may change them only where the reference's own forward changes its inputs."""
        if c.inputs_before != given.digest:
            raise VerdictReached("rejected", "the candidate's inputs differ from the ones the reference made: "
                                      "the hand-over of inputs was tampered with", ("inputs_differ",))
        reference_mutates = r.inputs_after != r.inputs_before
        if c.inputs_after != c.inputs_before and not reference_mutates:
            raise VerdictReached("rejected", "the candidate modified its inputs", ("input_mutation",))

    def _raise_violations(self, violations: list) -> None:
        if not violations:
            return
        # The report comes from the candidate's process: a flag name it made up becomes "violation".
        flags = tuple(_known_flag(v.get("flag")) for v in violations if isinstance(v, dict))
        detail = "; ".join(str(v.get("detail", "")) for v in violations if isinstance(v, dict))
        raise VerdictReached("rejected", f"the candidate broke a sandbox rule: {detail}", flags or ("violation",))

    def _judge_precision(self) -> None:
        if not self.reduced_precision:
            return
        if self.options.precision_policy == "reject":
            raise VerdictReached("rejected", "the error level shows arithmetic below the reference's precision "
                                      "(precision policy: reject)", ("reduced_precision",))
        self.flags.append("reduced_precision")

    # -- talking to workers -----------------------------------------------------------------

    def _send(self, worker: WorkerProcess, message: dict) -> None:
        try:
            worker.send(message)
        except (WorkerDied, WorkerTimeout) as exc:
            raise self._attribute(worker, exc) from None

    def _ask(self, worker: WorkerProcess, message: dict) -> tuple[dict, list[bytes]]:
        self._send(worker, message)
        return self._receive(worker, with_blobs=True)

    def _ask_both(self, messages: dict, with_blobs: bool = False):
        """Send to both workers, then collect both replies (they work in parallel)."""
        for worker, message in messages.items():
            self._send(worker, message)
        replies, blobs = {}, {}
        # The reference first: when it fails, the problem is at fault, not the candidate.
        for worker in (self.reference, self.candidate):
            replies[worker], blobs[worker] = self._receive(worker, with_blobs=True)
        return (replies, blobs) if with_blobs else replies

    def _receive(self, worker: WorkerProcess, with_blobs: bool = False):
        """The worker's next reply; a failure it reports becomes the verdict (or ProblemError
        for the reference), as does its death or silence past the deadline."""
        try:
            reply, blobs = worker.receive(self.deadline)
            while worker is self.candidate and isinstance(reply, dict) and "build" in reply:
                worker.send(self._serve_build(reply["build"]))  # then the candidate goes on loading
                reply, blobs = worker.receive(self.deadline)
        except (WorkerDied, WorkerTimeout) as exc:
            raise self._attribute(worker, exc) from None
        if not isinstance(reply, dict):
            raise VerdictReached("rejected", "malformed reply", ("protocol_violation",))
        if not reply.get("ok", False):
            self._fail(worker, reply)
        return (reply, blobs) if with_blobs else (reply, [])

    def _serve_build(self, raw: object) -> dict:
        """A build request from the candidate's worker, answered from the cache or by a build."""
        if self.builds is None:
            raise VerdictReached("rejected", "the candidate sent a build request it was not offered",
                          ("protocol_violation",))
        begin = time.monotonic()
        service = self.kernel_compiles if nvrtc.is_request(raw) else self.builds  # CuPy's NVRTC, or load_inline
        try:
            if service is self.kernel_compiles:
                build = service.compile(nvrtc.parse_request(raw), self.device, self.deadline - 1.0)
            else:
                build = service.build(builds_module.parse_request(raw), self.device, self.deadline - 1.0)
        except ValueError as exc:
            return {"cmd": "built", "ok": False, "error": str(exc)}
        except builds_module.BuildFailure as exc:
            if time.monotonic() >= self.deadline - 1.5:
                raise VerdictReached("timeout", f"{exc} (limit {self.options.timeout:g} s)") from None
            return {"cmd": "built", "ok": False, "error": str(exc)}
        waited = time.monotonic() - begin
        self.durations["build"] = round(self.durations.get("build", 0.0) + waited, 4)
        self.build_records.append(BuildRecord(
            name=build.name, key=build.key, ok=build.ok, cached=build.cached, mode=build.mode,
            lean=build.lean, build_seconds=build.seconds, wait_seconds=round(waited, 4)))
        if not build.ok:
            return {"cmd": "built", "ok": False, "error": "compilation failed", "log": build.log,
                    "cached": build.cached}
        path = service.deliver(build, self.candidate.scratch)
        return {"cmd": "built", "ok": True, "path": path, "cached": build.cached, "lean": build.lean,
                "lowered": build.lowered}

    def _fail(self, worker: WorkerProcess, reply: dict) -> None:
        kind, error = str(reply.get("kind", "runtime_error")), str(reply.get("error", "unknown error"))
        if worker is self.reference:
            raise ProblemError(self.problem.path, f"the reference failed: {error.strip()}")
        self._remember_labels(reply)
        log = str(reply.get("log", ""))[-_LOG_EXCERPT:]
        if kind == "bad_output":
            raise VerdictReached("rejected", error, ("output_not_plain_tensor",))
        if kind == "interception":
            raise VerdictReached("rejected", error, ("patched_runtime",))
        if kind == "protocol":
            raise VerdictReached("rejected", f"the candidate worker broke the protocol: {error}", ("protocol_violation",))
        if kind == "compile_error":
            raise VerdictReached("compile_error", error, log=log)
        if kind == "problem_error":
            raise ProblemCodeFailed(error, log=log)
        if reply.get("fatal"):
            error += "\n(CUDA error: the worker is retired)"
        raise VerdictReached("runtime_error", error, log=log)

    def _attribute(self, worker: WorkerProcess, exc: Exception) -> Exception:
        if worker is self.reference:
            return ProblemError(self.problem.path, f"the reference worker failed: {exc}\n{worker.log_tail()[-2000:]}")
        return exc

    def _parse_run(self, reply: dict, seeds: list[int], trusted: bool = False) -> RunReply:
        try:
            parsed = RunReply.model_validate(reply)
        except ValidationError as exc:
            if trusted:
                raise
            raise VerdictReached("rejected", f"the candidate worker sent a malformed reply: {exc.errors()[:1]}",
                          ("protocol_violation",)) from None
        if [c.seed for c in parsed.calls] != seeds or any(
                not (math.isfinite(c.ms) and c.ms >= 0) for c in parsed.calls):
            raise VerdictReached("rejected", "the candidate worker's reply does not match the request",
                          ("protocol_violation",))
        return parsed

    def _remember_labels(self, reply: dict) -> None:
        for key in ("builds", "extension_calls_total", "changed_settings", "torch_threads"):
            if key in reply:
                self.labels_source[key] = reply[key]

    def _new_seed(self) -> int:
        return self._seed_source.randrange(1, 2**31 - 1)

    def _new_seeds(self, count: int) -> list[int]:
        return [self._new_seed() for _ in range(count)]

    # -- result -----------------------------------------------------------------------------

    def _correct_message(self) -> str:
        t = self.timing
        note = " (re-measured: outlier)" if t.remeasured else ""
        return (f"all {len(self.trials)} trials matched the reference, and {t.candidate.samples} timed calls "
                f"({self.sampled_checks} compared in full, all fingerprinted); "
                f"speedup {t.reference_ms / t.candidate_ms:.3f}x +-{t.speedup_precision:.1%} (95% interval){note}")

    def _result(self, status: str, message: str, flags=(), log: str = "") -> EvalResult:
        builds = self.labels_source.get("builds", [])
        builds = builds if isinstance(builds, list) else []
        calls = self.labels_source.get("extension_calls_total", 0)
        changed = self.labels_source.get("changed_settings", [])
        kinds, label_flags = labels.optimization_kinds(
            self.source, builds, calls if isinstance(calls, int) else 0,
            changed if isinstance(changed, list) else [])
        all_flags = list(dict.fromkeys([*self.flags, *flags, *label_flags]))
        correct = status == "correct"
        timing_ok = correct and self.timing is not None
        self.durations["total"] = round(time.monotonic() - self.started, 4)
        return EvalResult(
            status=status, correct=correct,
            speedup=self.timing.reference_ms / self.timing.candidate_ms if timing_ok else None,
            reference_ms=self.timing.reference_ms if timing_ok else None,
            candidate_ms=self.timing.candidate_ms if timing_ok else None,
            message=message.strip(), problem_name=self.problem.name, problem_hash=self.problem.content_hash,
            candidate_hash=_sha256(self.source), trials=self.trials, timing=self.timing if timing_ok else None,
            checks=self.checks, flags=all_flags, optimization_kinds=kinds, isolation=self._isolation(),
            environment=Environment(**self.environment) if self.environment else None,
            compile_log=log, candidate_output=self.candidate.log_tail() if self.candidate else "",
            durations=self.durations, builds=self.build_records,
        )

    def _isolation(self) -> Isolation:
        b = self.backend
        return Isolation(backend=b.name, network_isolated=b.network_isolated,
                         filesystem_confined=b.filesystem_confined, pid_namespace=b.pid_namespace,
                         memory_limit_bytes=self.memory_limit,
                         memory_limit_mechanism="host watchdog on the resident memory of the worker's process tree"
                         + (", and the container's memory limit" if b.name == "docker" else ""),
                         warnings=list(b.warnings))

    def close(self) -> None:
        """Discard the candidate's worker and directory; the reference worker is not ours."""
        if self.candidate is not None:
            self.candidate.close()
        if self.workdir is not None and not self.options.keep_scratch:
            shutil.rmtree(self.workdir, ignore_errors=True)


def build_service(options: EvalOptions, backend: isolation.Backend) -> builds_module.BuildService | None:
    """The host's builder for this evaluation's extensions (None: candidates build in place)."""
    if options.build_mode == "off" or backend.name == "docker":
        return None  # in a container the image's torch builds (the host's may differ)
    return builds_module.BuildService(builds_module.BuildCache(options.build_cache), backend, options.build_mode)


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()

"""The referee: `evaluate(problem, candidate_source, options) -> EvalResult`.

An evaluation uses two sandboxed workers, one hosting the reference and one the candidate, so
the candidate never shares an interpreter with reference outputs, the comparison or the
verdict. The host (this module) picks secret seeds, asks both workers to run the same input
sets, compares what comes back and decides. See DESIGN.md for the threat model.

Phases: startup -> load (the candidate's compile happens here) -> correctness trials (full
outputs, input digests) -> timing (interleaved rounds, fingerprints of every timed call
checked) -> verdict. The first rule broken ends the evaluation with that verdict.

`_Session` is one candidate's evaluation; `kernelopt.sandbox.batch.Evaluator` runs sessions,
supplies their workers (a fresh candidate worker each, a warm reference worker) and keeps the
reference's correctness outputs across candidates. `evaluate` is an Evaluator with one candidate.
"""

from __future__ import annotations

import collections
import math
import os
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
from kernelopt.sandbox import compare, isolation, labels, timing
from kernelopt.sandbox.process import WorkerDied, WorkerProcess, WorkerTimeout
from kernelopt.sandbox.results import (
    BuildRecord, Check, Environment, EvalOptions, EvalResult, Isolation, Timing, TrialResult,
)

INIT_SEED = 42  # KernelBench seeds 42 before get_init_inputs, Model(...) and ModelNew(...)
_ROUND_TARGET_S = 0.05  # aim for rounds of about this long, so interleaving stays fine-grained
_ROUND_WALL_TARGET_S = 0.15  # ... and for this much host time per worker and round, all included
_MAX_CALLS_PER_ROUND = 50
_MIN_ROUNDS = 3  # interleaving: no single round (one slow moment of one side) decides
_ROUND_BYTES = 1 << 30  # inputs generated up front + outputs kept for the sampled comparison
_LOG_EXCERPT = 8000
_SETTLE_S = 30.0  # for the reference to finish a round a candidate's verdict cut short


class Verdict(Exception):
    """Ends an evaluation early with a status (control flow, not an error)."""

    def __init__(self, status: str, message: str, flags: tuple[str, ...] = (), log: str = ""):
        super().__init__(message)
        self.status, self.message, self.flags, self.log = status, message, list(flags), log


class ProblemCodeFailed(Verdict):
    """The problem's own code (its import or get_init_inputs) failed in the candidate's worker,
    before any candidate code ran. The reference's load decides whom to blame: when it fails
    too, the problem is broken (ProblemError); otherwise this is the candidate's verdict."""

    def __init__(self, message: str, log: str = ""):
        super().__init__("runtime_error", message, log=log)


class CallRecord(BaseModel):
    seed: int
    ms: float
    host_ms: float
    meta: list[tuple[list[int], str, str]]
    aliases_input: bool
    fingerprints: list[dict]
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
class ReferenceTrials:
    """The reference's results for the correctness trials' input seeds: what a candidate's
    trials are compared with. An Evaluator keeps them for all its candidates (same seeds)."""

    calls: list[CallRecord]
    outputs: list[list[torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(self.output_bytes(index) for index in range(len(self.outputs)))

    def output_bytes(self, index: int) -> int:
        return sum(t.numel() * t.element_size() for t in self.outputs[index])


def _joined(first: ReferenceTrials | None, more: ReferenceTrials | None) -> ReferenceTrials | None:
    """Reference trials run in groups, in order, as one (None: none run)."""
    if first is None or more is None:
        return first or more
    return ReferenceTrials(calls=first.calls + more.calls, outputs=first.outputs + more.outputs)


def resolve_device(requested: str) -> str:
    """'auto' -> 'cuda:0' when CUDA is available, else 'cpu'; validate the rest."""
    if requested == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested == "cuda" or requested.startswith("cuda:"):
        index = 0 if requested == "cuda" else requested.split(":", 1)[1]
        if not str(index).isdigit():
            raise ValueError(f"invalid device {requested!r}: use auto, cpu, cuda or cuda:N")
        if not torch.cuda.is_available():
            raise ValueError(f"device {requested!r} requested but CUDA is not available here")
        if int(index) >= torch.cuda.device_count():
            raise ValueError(f"device {requested!r}: only {torch.cuda.device_count()} CUDA device(s)")
        return f"cuda:{index}"
    raise ValueError(f"invalid device {requested!r}: use auto, cpu, cuda or cuda:N")


def default_memory_limit() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def timing_cpu(options: EvalOptions, device: str) -> int | None:
    """The CPU core both workers run their timed calls on, or None to leave them unpinned.

    A small CUDA kernel is timed partly on the host (launch, synchronisation), and two processes
    on different cores see different host speeds: an identical copy measured 0.85x-1.20x across
    evaluations on an H100 unpinned. On one core, both sides pay the same host costs. The core
    is the last one this process may use (the first ones are where the OS places most work)."""
    if options.pin_timing == "off" or (options.pin_timing == "auto" and not device.startswith("cuda")):
        return None
    return max(os.sched_getaffinity(0))


def evaluate(problem: Problem, candidate_source: str, options: EvalOptions | None = None) -> EvalResult:
    """Judge one candidate against the reference. Raises ProblemError when the reference itself
    fails, ValueError for an unusable device, IsolationError for an unusable backend and
    SandboxError when a worker cannot start; every failure of the candidate is a verdict."""
    from kernelopt.sandbox.batch import Evaluator  # batch builds on this module

    # No spare: nothing follows this candidate, and a spare's start would compete for the host.
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        return evaluator.evaluate(candidate_source)


class _Session:
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
        self.build_records: list[BuildRecord] = []
        self.candidate = self.reference = None
        self.timing_cpu = timing_cpu(options, device)

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
        return verdict or self._result("correct", self._correct_message())

    def _stage(self, *phases) -> EvalResult | None:
        """Run phases in order; the first rule broken becomes the result."""
        try:
            for name, step in phases:
                self._phase(name, step)
        except Verdict as verdict:
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
        message = {"cmd": "load", "device": isolation.device_inside(self.backend, self.device),
                   "init_seed": INIT_SEED,
                   "fingerprint_seed": self.fingerprint_seed, "host_builds": self.builds is not None,
                   "problem_path": str(scratch / "problem.py")}
        if with_candidate:
            message["candidate_path"] = str(scratch / "candidate.py")
        return message

    def _load_candidate(self) -> None:
        scratch = self.candidate.scratch
        (scratch / "candidate.py").write_text(self.source)
        try:
            self.candidate_load, _ = self._ask(self.candidate, self._load_message(scratch, with_candidate=True))
        except ProblemCodeFailed as failure:
            self.problem_code_failed = failure  # judged once the reference has loaded
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
            raise Verdict("rejected", "the candidate changed the problem's init inputs", ("inputs_differ",))
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
            raise Verdict("incorrect", f"trial {failed[0].index}: {failed[0].message}")
        self._judge_precision()

    def _trial_groups(self):
        """The trials' indices in groups whose inputs and outputs fit in _ROUND_BYTES at once.
        A worker makes a group's inputs up front and keeps its outputs until they are sent, and
        the host holds a group's outputs while comparing: on KernelBench's largest problems (6 GB
        inputs and outputs) five trials at once would need 64 GB per worker, on one GPU with the
        reference's. The sizes come from the kept reference trials, else from the first trial,
        run alone."""
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
        """Correctness trials `indices`, run in both workers in parallel, compared on the host.
        Returns the reference's results for them when they were not known (None otherwise)."""
        seeds = [self.trial_seeds[i] for i in indices]
        message = {"cmd": "run", "seeds": seeds, "hash_inputs": True, "return_outputs": True}
        # The candidate's trial outputs are compared in full here, so it skips fingerprinting
        # them; the reference's fingerprints check its replays against the kept outputs.
        trials = dict(message, fingerprints=False)
        fresh = None
        if self.expected is None:
            replies, blobs = self._ask_both({self.candidate: trials, self.reference: message}, with_blobs=True)
            fresh = expected = self._reference_trials(replies[self.reference], blobs[self.reference], seeds)
        else:
            # The reference's outputs for these seeds are known. It still runs the same calls
            # (nothing sent back but fingerprints), so that when timing starts it has made the
            # same calls as the candidate: a stateful reference stays comparable.
            replay = {"cmd": "run", "seeds": seeds}
            replies, blobs = self._ask_both({self.candidate: trials, self.reference: replay}, with_blobs=True)
            self._check_replay(self._parse_run(replies[self.reference], seeds, trusted=True), indices)
            expected = ReferenceTrials(calls=[self.expected.calls[i] for i in indices],
                                       outputs=[self.expected.outputs[i] for i in indices])
        cand = self._parse_run(replies[self.candidate], seeds)
        self._raise_violations(cand.violations)
        self._check_sandbox_census()
        for position, (c, r) in enumerate(zip(cand.calls, expected.calls)):
            self._check_call_invariants(c, r)
            self._check_inputs(c, r)
            try:
                out = compare.load_tensors(blobs[self.candidate][position])
            except (compare.BadOutputBlob, IndexError) as exc:
                raise Verdict("rejected", f"candidate outputs unusable: {exc}", ("protocol_violation",))
            comparison = compare.compare_outputs(out, expected.outputs[position], self.options)
            self.reduced_precision |= comparison.reduced_precision
            self.trials.append(compare.trial_result(indices[position], seeds[position], comparison))
            self.bytes_per_call = max(self.bytes_per_call, r.input_bytes + expected.output_bytes(position))
        return fresh

    def _reference_trials(self, reply: dict, blobs: list[bytes], seeds: list[int]) -> ReferenceTrials:
        ref = self._parse_run(reply, seeds, trusted=True)
        try:
            outputs = [compare.load_tensors(blob) for blob in blobs]
        except compare.BadOutputBlob as exc:
            raise ProblemError(self.problem.path, f"the reference worker sent unusable outputs: {exc}") from None
        if len(outputs) != len(seeds):
            raise ProblemError(self.problem.path, "the reference worker sent outputs for too few trials")
        return ReferenceTrials(calls=ref.calls, outputs=outputs)

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
        """Interleaved rounds until the spread settles, the sample cap or the time budget."""
        begin = time.monotonic()
        warm = self._timed_round(self._new_seeds(self.options.warmup_calls), flip=False)
        harness_s = (time.monotonic() - begin) / (2 * self.options.warmup_calls)  # per call, all included
        slowest_s = max(statistics.median(warm[0]), statistics.median(warm[1])) / 1e3
        per_round = max(1, min(_MAX_CALLS_PER_ROUND, int(_ROUND_TARGET_S / max(slowest_s, 1e-6)),
                               int(_ROUND_WALL_TARGET_S / max(harness_s, 1e-6)),
                               _ROUND_BYTES // self.bytes_per_call))
        # One discarded round of the measured size: allocator and caches reach the state the
        # measured rounds will see (the first round of a fresh process is often much slower).
        self._timed_round(self._new_seeds(per_round), flip=True)
        round_s = per_round * harness_s * 2
        cand_ms, ref_ms, slack_c, slack_r, rounds = self._measured_rounds(per_round, round_s)
        cand_stats = timing.summarize(cand_ms)
        if (slack_c > self._wall_clock_allowance(cand_stats.median_ms, slack_r)
                and time.monotonic() + _MIN_ROUNDS * round_s < self.deadline - 1.0):
            # A gross gap must show again in a fresh measurement: a busy host can preempt an
            # honest worker during its loop, while forged timings or work hidden from the
            # timer show every time. Only the fresh measurement is kept, so behaving well in
            # it alone gains nothing.
            cand_ms, ref_ms, slack_c, slack_r, rounds = self._measured_rounds(per_round, round_s)
            cand_stats = timing.summarize(cand_ms)
        ref_stats = timing.summarize(ref_ms)
        self._check_wall_clock(cand_stats.median_ms, slack_c, slack_r)
        # What the host clock says the candidate's call costs, trusting only the reference's
        # harness slack; used whenever the candidate's own timer claims noticeably less.
        host_bound = cand_stats.median_ms + slack_c - slack_r
        believed = cand_stats.median_ms
        if host_bound - believed > 0.05 + 0.05 * believed:
            believed = host_bound
        method = ("cuda events + device-wide synchronize, L2 flushed before each call"
                  if self.device.startswith("cuda") else "host perf_counter per call")
        return Timing(method=method, reference=ref_stats, candidate=cand_stats, rounds=rounds,
                      calls_per_round=per_round, reference_ms=ref_stats.median_ms, candidate_ms=believed,
                      candidate_host_bound_ms=host_bound,
                      wall_speedup=(ref_stats.median_ms + slack_r) / (cand_stats.median_ms + slack_c),
                      speedup_precision=timing.speedup_precision(cand_stats, ref_stats),
                      reference_overhead_ms=slack_r, candidate_overhead_ms=slack_c)

    def _measured_rounds(self, per_round: int, round_s: float):
        """Measured rounds (each expected to take `round_s`) until _timing_done: per-call ms of
        both sides, the median per-call loop time each side's timer did not account for, and
        the number of rounds."""
        cand_ms, ref_ms, cand_over, ref_over = [], [], [], []
        budget_end = time.monotonic() + self.options.timing_budget
        rounds = 0
        while True:
            c, r, c_over, r_over = self._timed_round(self._new_seeds(per_round), flip=rounds % 2 == 1)
            cand_ms += c
            ref_ms += r
            cand_over.append(c_over)
            ref_over.append(r_over)
            rounds += 1
            if self._timing_done(cand_ms, ref_ms, rounds, budget_end, round_s):
                return cand_ms, ref_ms, statistics.median(cand_over), statistics.median(ref_over), rounds

    def _timing_done(self, cand_ms, ref_ms, rounds: int, budget_end: float, round_s: float) -> bool:
        options = self.options
        if time.monotonic() + round_s > self.deadline - 1.0:
            return True
        if min(len(cand_ms), len(ref_ms)) >= options.max_timed_calls and rounds >= _MIN_ROUNDS:
            return True
        enough = min(len(cand_ms), len(ref_ms)) >= options.min_timed_calls and rounds >= _MIN_ROUNDS
        if not enough:
            return False
        cand, ref = timing.summarize(cand_ms), timing.summarize(ref_ms)
        settled = max(cand.rel_iqr, ref.rel_iqr) <= options.target_rel_spread
        precise = timing.speedup_precision(cand, ref) <= options.target_precision
        out_of_time = time.monotonic() + round_s > min(budget_end, self.deadline - 1.0)
        return settled or precise or out_of_time

    def _timed_round(self, seeds: list[int], flip: bool):
        """One round: both workers make the same secret inputs side by side, then each runs
        its calls with the host to itself (candidate first, or the reference), then both
        fingerprint their outputs side by side. Returns per-call ms of both and each side's
        per-call time in its call loop that its own timer did not account for, as the host's
        clock saw it."""
        message = {"cmd": "run", "seeds": seeds, "timed": True, "retain": True, "pin_cpu": self.timing_cpu}
        order = [self.reference, self.candidate] if flip else [self.candidate, self.reference]
        left = ["ready", "go", "report", "reply"]  # the reference's steps of this round still to come
        loops, replies = {}, {}
        try:
            for worker in (self.reference, self.candidate):
                self._send(worker, message)
            self._expect(self.reference, "ready")  # the reference first: its failure is the problem's
            left.remove("ready")
            self._expect(self.candidate, "ready")
            for worker in order:
                loops[worker] = self._timed_loop(worker)
                if worker is self.reference:
                    left.remove("go")
            self._send(self.reference, {"cmd": "report"})
            left.remove("report")
            self._send(self.candidate, {"cmd": "report"})
            replies[self.reference] = self._receive(self.reference, with_blobs=True)[0]
            left.remove("reply")
            replies[self.candidate] = self._receive(self.candidate, with_blobs=True)[0]
        except (Verdict, WorkerDied, WorkerTimeout):  # the candidate's end (the reference's is ProblemError)
            self._settle_reference(left)
            raise
        cand = self._parse_run(replies[self.candidate], seeds)
        ref = self._parse_run(replies[self.reference], seeds, trusted=True)
        self._raise_violations(cand.violations)
        self._check_sandbox_census()
        for c, r in zip(cand.calls, ref.calls):
            self._check_call_invariants(c, r)
            mismatch = compare.compare_fingerprints(c.fingerprints, r.fingerprints, [list(m) for m in r.meta],
                                                    self.options)
            if mismatch:
                raise Verdict("incorrect", f"a timed call's output does not match the reference ({mismatch}): "
                                           "correct when checked, wrong when timed", ("inconsistent_outputs",))
        self._compare_sampled_call(len(seeds))
        self._remember_labels(replies[self.candidate])
        cand_ms, ref_ms = [c.ms for c in cand.calls], [r.ms for r in ref.calls]
        n = len(seeds)
        return (cand_ms, ref_ms, (loops[self.candidate] - sum(cand_ms)) / n,
                (loops[self.reference] - sum(ref_ms)) / n)

    def _timed_loop(self, worker: WorkerProcess) -> float:
        """go ... done: the host's clock brackets the worker's loop of calls (ms)."""
        begin = time.perf_counter()
        self._send(worker, {"cmd": "go"})
        self._expect(worker, "done")
        return (time.perf_counter() - begin) * 1e3

    def _settle_reference(self, steps: list[str]) -> None:
        """The candidate's verdict ended a round midway: the warm reference worker takes the
        steps it still had, so it is back in step with the host for the next candidate. When
        that fails, the Evaluator's check before the next candidate replaces it."""
        deadline = time.monotonic() + _SETTLE_S
        try:
            for step in steps:  # ready: read it; go: send, read done; report: send; reply: read it
                if step in ("go", "report"):
                    self.reference.send({"cmd": step})
                if step != "report":
                    self.reference.receive(deadline)
        except (WorkerDied, WorkerTimeout):
            pass

    def _expect(self, worker: WorkerProcess, key: str) -> None:
        reply, _ = self._receive(worker)
        if reply.get(key) is not True:
            if worker is self.reference:
                raise ProblemError(self.problem.path, f"reference worker protocol error: expected {key}")
            raise Verdict("rejected", f"the candidate worker broke the timing handshake (expected {key})",
                          ("protocol_violation",))

    def _check_sandbox_census(self) -> None:
        """Host-side view of the candidate's sandbox, which code inside it cannot falsify."""
        extra = self.candidate.extra_processes()
        if extra > 0:
            raise Verdict("rejected", f"the candidate left {extra} process(es) running in its sandbox",
                          ("child_processes",))
        threads = self.candidate.thread_growth() - self.reference.thread_growth()
        if threads > 0:
            if "native_threads" not in self.flags:
                self.flags.append("native_threads")
            if not self.device.startswith("cuda"):  # the CUDA driver starts threads lazily
                extra = collections.Counter(self.candidate.thread_names()) - collections.Counter(
                    self.reference.thread_names())
                raise Verdict("rejected", f"the candidate runs {threads} more thread(s) than the reference "
                                          f"worker after its calls returned (names: {', '.join(sorted(extra))})",
                              ("native_threads",))

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
                raise Verdict("rejected", f"candidate outputs unusable: {exc}", ("protocol_violation",))
        comparison = compare.compare_outputs(outputs[self.candidate], outputs[self.reference], self.options)
        self.sampled_checks += 1
        if not comparison.passed:
            raise Verdict("incorrect", f"a timed call's output does not match the reference "
                                       f"({comparison.message}): correct when checked, wrong when timed",
                          ("inconsistent_outputs",))

    @staticmethod
    def _wall_clock_allowance(cand_median_ms: float, slack_r: float) -> float:
        # Small gaps are noise or small forgeries: the speedup then uses the host-clock bound
        # (see _timing_phase). Only a gross gap is rejected outright.
        return 3 * slack_r + 1.0 + 0.5 * cand_median_ms

    def _check_wall_clock(self, cand_median_ms: float, slack_c: float, slack_r: float) -> None:
        """The host's clock brackets each worker's loop of calls. Per call, the loop time its
        own timer does not account for (cloning the output, loop bookkeeping) is the same
        harness work in both workers; a candidate whose timer under-reports (forged timings) or
        that does work between its timed regions shows a larger gap than the reference."""
        allowance = self._wall_clock_allowance(cand_median_ms, slack_r)
        passed = slack_c <= allowance
        self.checks.append(Check(name="wall_clock_consistency", passed=passed,
                                 detail=f"per-call loop time outside the timer: candidate {slack_c:.3f} ms, "
                                        f"reference {slack_r:.3f} ms (allowed {allowance:.3f} ms)"))
        if not passed:
            raise Verdict("rejected", f"the host clock saw {slack_c - slack_r:.3f} ms per call more in the "
                                      "candidate's loop than its timer reported (work hidden from the timer, "
                                      "or forged timings)", ("timing_inconsistent",))

    # -- invariants -------------------------------------------------------------------------

    def _check_call_invariants(self, c: CallRecord, r: CallRecord) -> None:
        if c.aliases_input:
            raise Verdict("rejected", "an output shares memory with an input", ("output_aliases_input",))
        if len(c.meta) != len(r.meta):
            raise Verdict("incorrect", f"returned {len(c.meta)} tensor(s), expected {len(r.meta)}")
        for index, (cm, rm) in enumerate(zip(c.meta, r.meta)):
            if tuple(cm) != tuple(rm):
                raise Verdict("incorrect", f"output {index}: shape/dtype/device {list(cm)} != expected {list(rm)}")

    def _check_inputs(self, c: CallRecord, r: CallRecord) -> None:
        if c.inputs_before != r.inputs_before:
            raise Verdict("rejected", "the candidate's inputs differ from the reference's: "
                                      "input generation was tampered with", ("inputs_differ",))
        reference_mutates = r.inputs_after != r.inputs_before
        if c.inputs_after != c.inputs_before and not reference_mutates:
            raise Verdict("rejected", "the candidate modified its inputs", ("input_mutation",))

    def _raise_violations(self, violations: list) -> None:
        if not violations:
            return
        flags = tuple(str(v.get("flag", "violation")) for v in violations if isinstance(v, dict))
        detail = "; ".join(str(v.get("detail", "")) for v in violations if isinstance(v, dict))
        raise Verdict("rejected", f"the candidate broke a sandbox rule: {detail}", flags or ("violation",))

    def _judge_precision(self) -> None:
        if not self.reduced_precision:
            return
        if self.options.precision_policy == "reject":
            raise Verdict("rejected", "the error level shows arithmetic below the reference's precision "
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
            raise Verdict("rejected", "malformed reply", ("protocol_violation",))
        if not reply.get("ok", False):
            self._fail(worker, reply)
        return (reply, blobs) if with_blobs else (reply, [])

    def _serve_build(self, raw: object) -> dict:
        """A build request from the candidate's worker, answered from the cache or by a build."""
        if self.builds is None:
            raise Verdict("rejected", "the candidate sent a build request it was not offered",
                          ("protocol_violation",))
        begin = time.monotonic()
        try:
            request = builds_module.parse_request(raw)
            build = self.builds.build(request, self.device, self.deadline - 1.0)
        except ValueError as exc:
            return {"cmd": "built", "ok": False, "error": str(exc)}
        except builds_module.BuildFailure as exc:
            if time.monotonic() >= self.deadline - 1.5:
                raise Verdict("timeout", f"{exc} (limit {self.options.timeout:g} s)") from None
            return {"cmd": "built", "ok": False, "error": str(exc)}
        waited = time.monotonic() - begin
        self.durations["build"] = round(self.durations.get("build", 0.0) + waited, 4)
        self.build_records.append(BuildRecord(
            name=build.name, key=build.key, ok=build.ok, cached=build.cached, mode=build.mode,
            lean=build.lean, build_seconds=build.seconds, wait_seconds=round(waited, 4)))
        if not build.ok:
            return {"cmd": "built", "ok": False, "error": "compilation failed", "log": build.log,
                    "cached": build.cached}
        path = self.builds.deliver(build, self.candidate.scratch)
        return {"cmd": "built", "ok": True, "path": path, "cached": build.cached, "lean": build.lean}

    def _fail(self, worker: WorkerProcess, reply: dict) -> None:
        kind, error = str(reply.get("kind", "runtime_error")), str(reply.get("error", "unknown error"))
        if worker is self.reference:
            raise ProblemError(self.problem.path, f"the reference failed: {error.strip()}")
        self._remember_labels(reply)
        log = str(reply.get("log", ""))[-_LOG_EXCERPT:]
        if kind == "bad_output":
            raise Verdict("rejected", error, ("output_not_plain_tensor",))
        if kind == "compile_error":
            raise Verdict("compile_error", error, log=log)
        if kind == "problem_error":
            raise ProblemCodeFailed(error, log=log)
        if reply.get("fatal"):
            error += "\n(CUDA error: the worker is retired)"
        raise Verdict("runtime_error", error, log=log)

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
            raise Verdict("rejected", f"the candidate worker sent a malformed reply: {exc.errors()[:1]}",
                          ("protocol_violation",)) from None
        if [c.seed for c in parsed.calls] != seeds or any(
                not (math.isfinite(c.ms) and c.ms >= 0) for c in parsed.calls):
            raise Verdict("rejected", "the candidate worker's reply does not match the request",
                          ("protocol_violation",))
        return parsed

    def _remember_labels(self, reply: dict) -> None:
        for key in ("builds", "extension_calls_total", "changed_settings"):
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

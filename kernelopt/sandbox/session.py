"""One candidate's evaluation (`CandidateSession`): the phases in order and the result.

An evaluation uses two sandboxed workers, one hosting the reference and one the candidate, so
the candidate never shares an interpreter with reference outputs, the comparison or the
verdict. The host picks secret seeds, has the reference worker make the input sets, hands them
to both workers one call at a time, compares what comes back and decides. docs/referee.md
says what each step defends; the rules that decide are in rules/.

Phases: startup -> load (the candidate's compile happens here) -> correctness trials
(correctness.py) -> timing (timing/rounds.py) -> verdict. The first rule broken ends the
evaluation with that verdict. The conversation with the workers is conversation.py, build
serving build_serving.py, the records records.py.

`kernelopt.sandbox.batch.Evaluator`, the one entry point, runs sessions, supplies their workers
(a fresh candidate worker each, a warm reference worker) and keeps the reference's correctness
outputs across candidates. This module never imports batch.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable
from typing import cast
from pathlib import Path

from kernelopt.kernelbench import Problem
from kernelopt.sandbox import calls, census, correctness, every_element, isolation, kinds, physics, profiling, rules
from kernelopt.sandbox.build_serving import BuildServer
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.device import busy_host_warning, default_memory_limit, timing_cpus
from kernelopt.sandbox.process import MachineOutOfMemory, WorkerDied, WorkerProcess, WorkerTimeout
from kernelopt.sandbox.records import InputSet, ReferenceTrials
from kernelopt.sandbox.results import (
    Check, Environment, EvalOptions, EvalResult, Flag, Isolation, Profile, Status, Timing,
)
from kernelopt.sandbox.timing import rounds
from kernelopt.sandbox.worker import commands

INIT_SEED = 42  # KernelBench seeds 42 before get_init_inputs, Model(...) and ModelNew(...)


def load_message(backend: isolation.Backend, device: str, scratch: Path, *,
                 host_builds: bool, with_candidate: bool) -> dict:
    """The `load` command: the problem (and the candidate) from the worker's scratch directory,
    the model made from INIT_SEED on the device as the worker sees it."""
    return commands.load(device=isolation.device_inside(backend, device), init_seed=INIT_SEED,
                         host_builds=host_builds,
                         problem_path=str(scratch / "problem.py"),
                         candidate_path=str(scratch / "candidate.py") if with_candidate else None)


def _wakeup_warning(worker) -> list[str]:
    """A candidate whose worker could not deny itself timers, sockets and asynchronous I/O
    (worker/syscall_filter.py) could leave the kernel work to do in the reference's turns: the
    verdict says so."""
    if worker is None or worker.wakeup_filter in ("", None):
        return []
    return [f"the candidate's worker could still arm timers and open sockets ({worker.wakeup_filter}): work the "
            "kernel did for them while it was frozen could be charged to the reference"]


class CandidateSession:
    """One candidate's evaluation. `prepare` (its worker, its load and compile) may run ahead
    in a thread of the Evaluator's; `judge` (correctness, timing) runs with the device to
    itself. The session owns its candidate worker; the reference worker is the Evaluator's."""

    def __init__(self, problem: Problem, source: str, options: EvalOptions, device: str,
                 backend: isolation.Backend, *, serial: int, take_worker: Callable[[], WorkerProcess],
                 seed_source, trial_seeds: list[int]):
        self.problem, self.source, self.options = problem, source, options
        self.serial = serial
        self._take_worker = take_worker
        self.device, self.backend = device, backend
        self.memory_limit = options.memory_limit or default_memory_limit()
        self.started = time.monotonic()
        self.durations: dict[str, float] = {}
        self.checks: list[Check] = []
        self.findings = rules.Findings()
        self.trials: list = []
        self.timing: Timing | None = None
        self.environment: dict | None = None
        self.compared_calls = 0  # timed calls compared in full (every one)
        self.bytes_per_call = 1  # inputs + outputs of one call, known after the correctness trials
        self.judge_timed_dependence = True  # known after the correctness trials (correctness.Correctness)
        self._seed_source = seed_source  # this candidate's timing inputs and their placement
        self.trial_seeds = trial_seeds
        # Answered calls the every-element check re-runs perturbed, chosen as they pass.
        self.kept = every_element.Kept(options.element_checks, seed_source)
        self.expected: ReferenceTrials | None = None  # the reference's trial results
        self.candidate_load: dict = {}
        self.problem_code_failed: rules.ProblemCodeFailed | None = None
        self.killed_by_machine: MachineOutOfMemory | None = None  # the kernel's OOM kill while loading
        self.workdir: Path | None = None  # the candidate worker's directory, once taken
        self.aborted = False
        self._paused_at = self.started  # when prepare ended: the candidate's clock stopped
        self.builds = BuildServer(options, backend, device)
        self.conversation = Conversation(problem, self.started + options.timeout, self._serve_build)
        self.timing_cpus = timing_cpus(options, device)
        # The reference's part of the profiling pass, kept by the Evaluator across candidates;
        # reference_profiled: this session ran the pass in the reference worker.
        self.reference_profile: profiling.ReferenceProfile | None = None
        self.reference_profiled = False

    @property
    def candidate(self) -> WorkerProcess:
        return self.conversation.candidate

    @property
    def reference(self) -> WorkerProcess:
        return self.conversation.reference

    @property
    def candidate_pid(self) -> int | None:
        return self.candidate.process.pid if self.candidate is not None else None

    @property
    def reference_pid(self) -> int | None:
        return self.reference.process.pid if self.reference is not None else None

    # -- the phases -------------------------------------------------------------------------

    def prepare(self) -> EvalResult | None:
        """Take a started candidate worker and load the candidate (its compile happens here).
        Returns the verdict when one is reached here (compile error, crash, timeout), else
        None: the candidate waits, its clock stopped, for `judge`."""
        self.started = time.monotonic()
        self.conversation.deadline = self.started + self.options.timeout
        verdict = self._stage(("startup", self._take_candidate_worker), ("load", self._load_candidate))
        self._paused_at = time.monotonic()
        return verdict

    def judge(self, reference_ready: Callable[[], WorkerProcess], expected: ReferenceTrials | None) -> EvalResult:
        """Correctness and timing against the reference worker `reference_ready()` returns;
        `expected`: the reference's trial results when the Evaluator kept them."""
        self.expected = expected
        begin = time.monotonic()
        self.conversation.reference = reference_ready()
        self._add_duration("startup", time.monotonic() - begin)
        self._resume_clock(queued=begin - self._paused_at)
        verdict = self._stage(("load", self._load_reference), ("correctness", self._check_correctness),
                              ("timing", self._measure), ("every_element", self._check_elements))
        if verdict is not None:
            return verdict
        result = self._result("correct", self._correct_message())
        if self.options.profile:
            begin = time.monotonic()
            result.profile = self._profile_pass()
            result.durations["profile"] = round(time.monotonic() - begin, 4)
        return result

    def _stage(self, *phases) -> EvalResult | None:
        """Run phases in order; the first rule broken becomes the result."""
        try:
            try:
                for name, step in phases:
                    self._phase(name, step)
            except WorkerTimeout as exc:
                rules.enforce(rules.worker_timeout(str(exc), self.options.timeout))
            except WorkerDied as exc:
                rules.enforce(rules.memory_limit(str(exc), exc.memory_exceeded) or rules.worker_died(str(exc)))
        except rules.VerdictReached as reached:
            return self._result(reached.status, reached.message, reached.verdict)
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
        self.conversation.deadline += time.monotonic() - self._paused_at
        self.started += queued
        if queued >= 0.01:
            self.durations["waiting"] = round(queued, 4)

    def _take_candidate_worker(self) -> None:
        self.conversation.candidate = self._take_worker()
        self.workdir = self.candidate.scratch.parent
        if self.aborted:  # abort() ran while the worker was being taken
            self.candidate.kill()

    def abort(self) -> None:
        """Called from another thread: end a `prepare` in progress (its waits end when its
        worker is killed)."""
        self.aborted = True
        if self.candidate is not None:
            self.candidate.kill()

    def _serve_build(self, raw: object) -> dict:
        reply = self.builds.serve(raw, self.conversation.deadline, lambda: self.candidate.scratch)
        if self.builds.records:
            self.durations["build"] = round(self.builds.seconds, 4)
        return reply

    def _load_message(self, scratch: Path, with_candidate: bool) -> dict:
        return load_message(self.backend, self.device, scratch, host_builds=self.builds.offered,
                            with_candidate=with_candidate)

    def _load_candidate(self) -> None:
        scratch = self.candidate.scratch
        (scratch / "candidate.py").write_text(self.source)
        try:
            self.candidate_load, _ = self.conversation.ask(self.candidate, self._load_message(scratch, True))
        except rules.ProblemCodeFailed as failure:
            self.problem_code_failed = failure  # judged once the reference has loaded
            return
        except MachineOutOfMemory as exc:  # whose memory it was is judged once the reference has loaded
            self.killed_by_machine = exc
            return
        except WorkerDied as exc:  # the problem's own import (os._exit) may have killed it: the same rule
            if exc.memory_exceeded:
                raise
            self.problem_code_failed = rules.died_while_loading(str(exc))
            return
        self.conversation.remember_labels(self.candidate_load)
        rules.enforce(rules.guard_findings(self.candidate_load.get("violations", [])))
        # From here on the candidate runs only inside its calls' windows (calls.py): it waits
        # for the device, and for the reference, frozen.
        self.candidate.freeze()

    def _load_reference(self) -> None:
        """Load the reference again (a fresh model from the init seed, as the candidate's) and
        compare the two loads."""
        ref, _ = self.conversation.ask(self.reference, self._load_message(self.reference.scratch, False))
        if self.problem_code_failed is not None:
            raise self.problem_code_failed
        if self.killed_by_machine is not None:
            raise self.conversation.attribute(self.candidate, self.killed_by_machine)
        self.environment = ref.get("environment")
        self._census()
        rules.enforce(rules.init_inputs_changed(self.candidate_load.get("init_digest"), ref.get("init_digest")))
        self.checks.append(Check(name="load", passed=True, detail="reference and candidate loaded"))

    def _census(self) -> None:
        census.check(self.conversation, self.device, self.findings)

    def _call_census(self) -> None:
        census.processes(self.conversation)

    def _transport(self) -> str:
        """How outputs reach the host, the same for every phase (calls.transport_for)."""
        return calls.transport_for([self.candidate, self.reference], self.device)

    def _check_correctness(self) -> None:
        phase = correctness.TrialPhase(self.conversation, self.options, self.trial_seeds, self.expected,
                                       self._call_census, self.checks, self._transport(),
                                       self.device, self.timing_cpus, kept=self.kept)
        self.trials = phase.found.trials  # kept by the result whatever the verdict
        found = correctness.check_correctness(phase, self.findings)
        self._census()
        self.expected, self.bytes_per_call = found.expected, found.bytes_per_call
        self.judge_timed_dependence = found.judge_timed_dependence

    def _measure(self) -> None:
        timer = rounds.Timer(self.conversation, self.options, self.device, self._seed_source, self.timing_cpus,
                             self.bytes_per_call, self._call_census, self.findings,
                             self._transport(), judge_dependence=self.judge_timed_dependence, kept=self.kept,
                             floor=self._floor())
        try:
            self.timing = rounds.measure(timer, self.checks)
        finally:
            self.compared_calls = timer.compared

    def _floor(self) -> physics.Floor | None:
        """The physical floor of one call: its inputs and outputs (counted on the reference's
        trials) at the device's ceiling, measured on the host once per machine (physics.py)."""
        device_name = (self.environment or {}).get("device_name")
        return physics.floor_for(self.device, device_name if isinstance(device_name, str) else None,
                                 self.bytes_per_call)

    def _check_elements(self) -> None:
        """The every-element check right after the timed calls, with nothing between them that
        the candidate could take for the end of timing; then its labels, and the census."""
        every_element.check_elements(every_element.ElementCheck(
            self.conversation, self.options, self._seed_source, self._transport(), self.device,
            rounds.timing_cpu(self.timing_cpus, 0), self._call_census), self.kept, self.checks)
        self.conversation.collect_labels(self.findings)
        self._census()

    # -- after the verdict ------------------------------------------------------------------

    def _profile_pass(self) -> Profile:
        """After a correct verdict, outside the timed calls: one advisory profiling pass in each
        side's own worker on one input set the reference made (sandbox/profiling.py). Nothing
        of the verdict comes from it; whatever fails in it is a note."""
        begin, notes = time.monotonic(), list[str]()
        try:
            kept = self.reference_profile
            if kept is None:
                self.reference_profiled = True  # the Evaluator replaces a worker the profiler ran in
                input_set = self.conversation.make_inputs([self._seed_source.randrange(1, 2**31 - 1)])[0]
                kept = profiling.ReferenceProfile(input_set, None)
                kept.reply = self._ask_profile(self.reference, input_set, True, kept.notes)
                self.reference_profile = kept
            reply = self._ask_profile(self.candidate, cast(InputSet, kept.input_set), False, notes)
        except Exception as exc:  # noqa: BLE001 - advisory: the verdict stands
            return Profile(device=self.device, notes=[f"not profiled: {type(exc).__name__}: {str(exc)[:300]}"],
                           seconds=round(time.monotonic() - begin, 4))
        device_name = (self.environment or {}).get("device_name")
        assert self.timing is not None  # the pass follows a correct verdict
        return profiling.assemble(self.device, kept, reply, self.timing, device_name, notes, time.monotonic() - begin)

    def _ask_profile(self, worker: WorkerProcess, input_set: InputSet, count_work: bool,
                     notes: list[str]) -> dict | None:
        """One side's `profile` reply, or None with a note (its failure, death or silence)."""
        deadline = time.monotonic() + profiling.side_limit(self.device, self.timing)
        try:
            worker.send_inputs({**commands.call(input_set.seed, input_set.spec),
                                **profiling.message(count_work, self.device)}, input_set.packed, deadline)
            reply, _ = worker.receive(deadline)
        except (WorkerDied, WorkerTimeout) as exc:
            notes.append(f"{worker.role} not profiled: {exc}")
            return None
        if not isinstance(reply, dict) or not reply.get("ok"):
            error = str(reply.get("error", reply)) if isinstance(reply, dict) else "a malformed reply"
            notes.append(f"{worker.role} not profiled: {(error.strip().splitlines() or [''])[0][:300]}")
            return None
        return reply

    def _correct_message(self) -> str:
        t = self.timing
        assert t is not None
        note = " (re-measured)" if t.remeasured else ""
        return (f"all {len(self.trials)} trials matched the reference, and {t.candidate.samples} timed calls "
                f"(all {self.compared_calls} compared in full); "
                f"speedup {t.speedup:.3f}x +-{t.speedup_precision:.1%} (95% interval){note}")

    def _result(self, status: str, message: str, verdict: rules.Verdict | None = None) -> EvalResult:
        source = self.conversation.labels
        builds = source.get("builds", [])
        calls = source.get("extension_calls_total", 0)
        changed = source.get("changed_settings", [])
        found_kinds, label_flags = kinds.optimization_kinds(
            self.source, builds if isinstance(builds, list) else [], calls if isinstance(calls, int) else 0,
            changed if isinstance(changed, list) else [])
        found = self.findings.verdicts + ([verdict] if verdict is not None else [])
        found += [v for v in [rules.custom_kernel_unused(label_flags)] if v is not None]
        if self.candidate is not None:
            found += [v for v in [rules.uncontained(self.candidate.containment_kind, self.candidate.containment_record,
                                                    self.candidate.cgroup_escape)] if v is not None]
        all_flags = list(dict.fromkeys(flag for v in found for flag in v.flags))
        fired = list(dict.fromkeys(v.rule for v in found))
        timing = self.timing if status == "correct" else None
        warnings = [timing.floor_note] if timing is not None and timing.floor_note else []
        busy = busy_host_warning() if timing is not None else None
        warnings += [busy] if busy else []
        self.durations["total"] = round(time.monotonic() - self.started, 4)
        return EvalResult(
            status=cast(Status, status), correct=status == "correct", speedup=timing.speedup if timing else None,
            reference_ms=timing.reference_ms if timing else None, candidate_ms=timing.candidate_ms if timing else None,
            message=message.strip(), problem_name=self.problem.name, problem_hash=self.problem.content_hash,
            candidate_hash=hashlib.sha256(self.source.encode("utf-8")).hexdigest(), trials=self.trials,
            timing=timing, checks=self.checks, flags=cast(list[Flag], all_flags), rules=fired, optimization_kinds=found_kinds,
            isolation=self._isolation(), environment=Environment(**self.environment) if self.environment else None,
            compile_log=verdict.log if verdict is not None else "",
            candidate_output=self.candidate.log_tail() if self.candidate else "",
            durations=self.durations, builds=self.builds.records, warnings=warnings,
        )

    def _isolation(self) -> Isolation:
        b, worker = self.backend, self.candidate
        kind = worker.containment_kind if worker is not None else ("docker" if b.name == "docker" else "")
        held = "process tree" if kind == "none" else "group"
        return Isolation(backend=b.name, network_isolated=b.network_isolated,
                         filesystem_confined=b.filesystem_confined, pid_namespace=b.pid_namespace,
                         memory_limit_bytes=self.memory_limit,
                         memory_limit_mechanism=f"host watchdog on the resident memory of the worker's {held}"
                         + (", and the container's memory limit" if b.name == "docker" else "")
                         + (", backed by the kernel's memory limit of the group"
                            if worker is not None and worker.kernel_memory_limit else ""),
                         containment=kind, containment_detail=worker.containment_record if worker is not None else "",
                         wakeup_sources_denied=worker is not None and worker.wakeup_filter == "",
                         warnings=list(b.warnings) + _wakeup_warning(worker))

    def close(self) -> None:
        """Discard the candidate's worker and directory; the reference worker is not ours."""
        if self.candidate is not None:
            self.candidate.close()
        if self.workdir is not None and not self.options.keep_scratch:
            shutil.rmtree(self.workdir, ignore_errors=True)

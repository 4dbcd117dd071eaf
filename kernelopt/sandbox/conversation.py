"""The host's side of the worker protocol with both workers of one evaluation: send, ask,
receive, expect, parse, settle, and whom a failure is blamed on.

A failure of the reference worker (its reply, its death, its silence) is the problem's
(ProblemError); the candidate's becomes a verdict through the rules (sandbox/rules/). A run
(header, calls, report) is written once, in `WorkerRun`: the correctness trials drive the two
workers' runs call by call side by side, the timed rounds one after the other, and a run the
candidate's verdict cut short is finished in the reference worker by `WorkerRun.settle`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import ValidationError

from kernelopt.kernelbench import Problem, ProblemError
from kernelopt.sandbox import rules
from kernelopt.sandbox.device import machine_memory_bytes
from kernelopt.sandbox.process import (HostOutOfRoom, MachineOutOfMemory, WorkerDied, WorkerProcess, WorkerTimeout,
                                      host_resident_bytes)
from kernelopt.sandbox.records import InputSet, RunReply, input_sets
from kernelopt.sandbox.worker import commands

SETTLE_S = 30.0  # for the reference to finish a run a candidate's verdict cut short
OOM_MARGIN_BYTES = 256 << 20  # what a fast allocation adds between two of the watchdog's samples


class Conversation:
    """Both workers of one evaluation, and the evaluation's deadline (the session moves it while
    the candidate waits for the device). `serve_build` answers a candidate's build request;
    `labels` collects what the candidate's replies say about its builds and settings."""

    def __init__(self, problem: Problem, deadline: float, serve_build: Callable[[object], dict]):
        self.problem, self.deadline, self.serve_build = problem, deadline, serve_build
        # Set by the session: the candidate's at startup, the reference's when it is judged.
        self.candidate: WorkerProcess = None  # type: ignore[assignment]
        self.reference: WorkerProcess = None  # type: ignore[assignment]
        self.labels: dict = {}

    # -- one message ----------------------------------------------------------------------

    def send(self, worker: WorkerProcess, message: dict) -> None:
        try:
            worker.send(message)
        except (WorkerDied, WorkerTimeout) as exc:
            raise self.attribute(worker, exc) from None

    def send_inputs(self, worker: WorkerProcess, input_set: InputSet, at: int = 0) -> None:
        try:
            worker.send_inputs(commands.call(input_set.seed, input_set.spec), input_set.packed, self.deadline, at)
        except (WorkerDied, WorkerTimeout) as exc:
            raise self.attribute(worker, exc) from None

    def receive(self, worker: WorkerProcess) -> tuple[dict, list[bytes]]:
        """The worker's next reply; a failure it reports becomes the verdict (or ProblemError
        for the reference), as does its death or silence past the deadline. Build requests
        the candidate sends while it loads are answered on the way."""
        try:
            reply, blobs = worker.receive(self.deadline)
            while worker is self.candidate and isinstance(reply, dict) and "build" in reply:
                worker.send(self.serve_build(reply["build"]))  # then the candidate goes on loading
                reply, blobs = worker.receive(self.deadline)
        except (WorkerDied, WorkerTimeout) as exc:
            raise self.attribute(worker, exc) from None
        rules.enforce(rules.malformed_reply(reply))
        if not reply.get("ok", False):
            self.fail(worker, reply)
        return reply, blobs

    def ask(self, worker: WorkerProcess, message: dict) -> tuple[dict, list[bytes]]:
        self.send(worker, message)
        return self.receive(worker)

    def ask_both(self, message: dict) -> dict[WorkerProcess, list[bytes]]:
        """The same message to both workers (they work in parallel); their replies' blobs, the
        reference's read first: when it fails, the problem is at fault, not the candidate."""
        for worker in (self.candidate, self.reference):
            self.send(worker, message)
        return {worker: self.receive(worker)[1] for worker in (self.reference, self.candidate)}

    def expect(self, worker: WorkerProcess, key: str) -> dict:
        reply, _ = self.receive(worker)
        if reply.get(key) is not True:
            self.protocol_error(worker, key)
        return reply

    # -- failures ---------------------------------------------------------------------------

    def fail(self, worker: WorkerProcess, reply: dict) -> None:
        if worker is self.reference:
            raise ProblemError(self.problem.path, f"the reference failed: {str(reply.get('error', 'unknown error')).strip()}")
        self.remember_labels(reply)
        rules.enforce(rules.worker_failure(reply))

    def attribute(self, worker: WorkerProcess, exc: Exception) -> Exception:
        if worker is self.reference:
            if isinstance(exc, HostOutOfRoom):
                rules.enforce(self._room_taken(exc))  # ends here when the candidate's memory is why
            return ProblemError(self.problem.path, f"the reference worker failed: {exc}\n{worker.log_tail()[-2000:]}")
        if isinstance(exc, MachineOutOfMemory):
            return self._machine_ran_out(exc)
        return exc

    def _room_taken(self, refused: HostOutOfRoom) -> rules.Verdict | None:
        """The reference's reply was refused for want of memory: the candidate's verdict when its
        worker's memory beyond the reference's is why (a candidate that allocates GiBs could
        otherwise turn its evaluation, and a batch's, into the problem's error)."""
        if self.candidate is None:
            return None
        return rules.host_memory_taken(self.candidate.contained.memory_bytes(), refused.worker_bytes,
                                       refused.needed, refused.available_room, refused.budget_room)

    def _machine_ran_out(self, killed: MachineOutOfMemory) -> Exception:
        """The kernel killed the candidate's worker (its first choice) when the machine ran out:
        the problem's fault (ProblemError) where the candidate held no more than the reference
        does (a fifth more, and what the watchdog's interval can miss) and what the host and
        both workers were seen to hold explains the machine running out (3/4 of its memory);
        the candidate's otherwise (`killed`, a memory_limit verdict). Memory no one sees (a
        tmpfs file, an unmapped memfd, on a machine without a memory controller for the groups)
        can only be the candidate's code."""
        if self.reference is None or self.reference.process.poll() is not None:
            return killed
        reference_bytes = self.reference.contained.memory_bytes()
        seen = killed.peak_bytes + reference_bytes + host_resident_bytes()
        if killed.peak_bytes > reference_bytes * 1.2 + OOM_MARGIN_BYTES or seen < machine_memory_bytes() * 3 // 4:
            return killed
        return ProblemError(self.problem.path, "the evaluation does not fit this machine's memory (the host and both "
                            f"workers together): {killed}, no more than the reference's {reference_bytes / 2**30:.2f} GiB")

    def protocol_error(self, worker: WorkerProcess, expected: str) -> None:
        if worker is self.reference:
            raise ProblemError(self.problem.path, f"reference worker protocol error: expected {expected}")
        rules.enforce(rules.missing_in_reply(expected))

    def remember_labels(self, reply: dict) -> None:
        for key in ("builds", "extension_calls_total", "changed_settings", "torch_threads"):
            if key in reply:
                self.labels[key] = reply[key]

    # -- what replies carry -----------------------------------------------------------------

    def parse_run(self, worker: WorkerProcess, reply: dict, seeds: list[int]) -> RunReply:
        """A run's report with its calls' records, validated (the reference's is trusted)."""
        try:
            parsed = RunReply.model_validate(reply)
        except ValidationError as exc:
            if worker is self.reference:
                raise
            rules.enforce(rules.invalid_run_reply(list(exc.errors()) or ["invalid"]))
            raise
        rules.enforce(rules.run_mismatch(parsed, seeds))
        return parsed

    def call_record(self, worker: WorkerProcess, reply: dict) -> dict:
        """The record a call's answer carries (validated with the run's report: parse_run)."""
        if reply.get("called") is None or not isinstance(reply.get("record"), dict):
            self.protocol_error(worker, "called, with the call's record")
        return reply["record"]

    def make_inputs(self, seeds: list[int]) -> list[InputSet]:
        """Input sets made by the reference worker (trusted code only) for the host's seeds."""
        reply, blobs = self.ask(self.reference, commands.inputs(seeds))
        return input_sets(self.problem, seeds, reply, blobs)

    def run(self, worker: WorkerProcess, inputs: list[InputSet], flags: dict) -> WorkerRun:
        return WorkerRun(self, worker, inputs, flags)


class WorkerRun:
    """One worker's run, step by step: its header, each call (inputs sent, answer read), its
    report. It counts its steps, so that a run the candidate's verdict cut short can be
    finished in the reference worker (`settle`), which then stays in step for the next
    candidate."""

    def __init__(self, conversation: Conversation, worker: WorkerProcess, inputs: list[InputSet], flags: dict):
        self.conversation, self.worker, self.inputs, self.flags = conversation, worker, inputs, flags
        self.started = False  # the run header sent and "ready" read
        self.sent = 0  # call frames sent
        self.answered = 0  # call replies read
        self.report = ""  # "", "sent", "read"
        # Per call answered, on the host's clock (time.perf_counter, s): when it started, when it
        # ended, and when its end mark arrived (timing/allowance.py; checked_marks); and the
        # worker process's CPU time between its marks (s; None where the host cannot read it).
        self.marks: list[tuple[float, float, float]] = []
        self.cpu_s: list[float | None] = []
        # Per call, the host's clock (s) over the harness's steps before the call (hand-over to
        # the start's reading) and when the host acknowledged the end mark (the steps after the
        # call run from there to the record's arrival): the time outside the call, without the
        # host's own waits for the marks (timing/allowance.py, the check around the call).
        self.before_s: list[float] = []
        self.acked_at = 0.0
        self.read_cpu = False  # read the worker's CPU clock at each mark (the timed rounds on a CPU)
        self.sent_at = 0.0  # the host's clock as it began handing over the last call's inputs

    def start(self) -> None:
        self.conversation.send(self.worker, commands.run(len(self.inputs), **self.flags))
        self.conversation.expect(self.worker, "ready")
        self.started = True

    def send_call(self, at: int = 0) -> None:
        self.sent_at = time.perf_counter()
        self.conversation.send_inputs(self.worker, self.inputs[self.sent], at)
        self.sent += 1

    def read_call(self) -> tuple[dict, list[bytes]]:
        """A call's answer: its start and end marks, each answered with the host's word once it
        has read its clocks (the marks' readings checked against the host's clock in `marks`,
        the worker's CPU time between them in `cpu_s`), then its record, and its output blob
        when the run returns outputs."""
        start_mark, start_arrived = self._read_mark(commands.MARK_START)
        # The worker waits for our word: its CPU clock stands still while we read it.
        cpu_before = self.worker.cpu_seconds() if self.read_cpu else None
        self.conversation.send(self.worker, commands.marked())
        end_mark, end_arrived = self._read_mark(commands.MARK_END)
        cpu_after = self.worker.cpu_seconds() if self.read_cpu else None
        self.conversation.send(self.worker, commands.marked())
        self.acked_at = time.perf_counter()
        self.marks.append(checked_marks(start_mark.get("t"), end_mark.get("t"), self.sent_at, start_arrived,
                                        end_arrived))
        self.cpu_s.append(cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None)
        # A start reading the host cannot place counts the whole wait for the mark as the
        # harness's: the longer, for the check around the call.
        began = self.marks[-1][0]
        self.before_s.append((began if began != self.sent_at else start_arrived) - self.sent_at)
        reply, blobs = self.conversation.receive(self.worker)
        self.answered += 1
        record = self.conversation.call_record(self.worker, reply)
        if not self.flags.get("return_outputs"):
            return record, []
        if len(blobs) != 1:
            self.conversation.protocol_error(self.worker, "one output blob per call")
        return record, blobs

    def _read_mark(self, which: str) -> tuple[dict, float]:
        reply, _ = self.conversation.receive(self.worker)
        arrived = time.perf_counter()
        if reply.get("mark") != which:
            self.conversation.protocol_error(self.worker, f"the call's {which} mark")
        return reply, arrived

    def send_report(self) -> None:
        self.conversation.send(self.worker, commands.report())
        self.report = "sent"

    def read_report(self) -> dict:
        reply = self.conversation.receive(self.worker)[0]
        self.report = "read"
        return reply

    def settle(self) -> None:
        """Take the steps the run still had (its header, the calls it was not given or whose
        answers were not read, its report), with a deadline of its own. When that fails, the
        Evaluator's check before the next candidate replaces the worker."""
        deadline = time.monotonic() + SETTLE_S
        worker = self.worker
        try:
            if not self.started:
                worker.send(commands.run(len(self.inputs), **self.flags), deadline=deadline)
                worker.receive(deadline)
            for _ in range(self.sent - self.answered):
                receive_answer(worker, deadline)
            for input_set in self.inputs[self.sent:]:
                worker.send_inputs(commands.call(input_set.seed, input_set.spec), input_set.packed, deadline)
                receive_answer(worker, deadline)
            if not self.report:
                worker.send(commands.report(), deadline=deadline)
            if self.report != "read":
                worker.receive(deadline)
        except (WorkerDied, WorkerTimeout):
            pass


def checked_marks(start: object, end: object, sent_at: float, start_arrived: float,
                  end_arrived: float) -> tuple[float, float, float]:
    """A call's (start, end, end mark's arrival) on the host's clock (s), from the worker's
    readings of the same monotonic clock as its marks left, each kept only where the host's own
    clock allows it: the start between the host's hand-over of the inputs and the start mark's
    arrival (else the hand-over, the earliest the call can have started), the end between that
    start and the end mark's arrival (else the arrival, the latest it can have ended). A reading
    outside its window was not taken when the mark says: a worker on another clock, or a clock
    the program replaced. The start's reading leaves before any of the program's code runs; the
    end's could be the program's (a replaced clock): on a CPU the host's bracket is the worker's
    CPU clock instead, and elsewhere how late each end mark arrived after its reading is
    reported beside the reference's (timing/allowance.py, `Gaps.arrival`)."""
    began = start / 1e9 if type(start) is int and sent_at <= start / 1e9 <= start_arrived else sent_at
    ended = end / 1e9 if type(end) is int and began <= end / 1e9 <= end_arrived else end_arrived
    return began, ended, end_arrived


def receive_answer(worker: WorkerProcess, deadline: float) -> dict:
    """A call's answer read past its start and end marks, each acknowledged (a failure ends the
    marks early)."""
    while True:
        reply, _ = worker.receive(deadline)
        if not (isinstance(reply, dict) and reply.get("ok") and "mark" in reply):
            return reply
        worker.send(commands.marked(), deadline=deadline)

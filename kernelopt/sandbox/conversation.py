"""The host's side of the worker protocol with both workers of one evaluation: send, ask,
receive, and whom a failure is blamed on.

A failure of the reference worker (its reply, its death, its silence) is the problem's
(ProblemError); the candidate's becomes a verdict through the rules (sandbox/rules/). One call's
window is calls.py; every exchange here is a whole request and its answer, so a verdict that
ends an evaluation leaves the reference worker in step for the next candidate.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelopt.kernelbench import Problem, ProblemError
from kernelopt.kernelbench.problem import reference_failure
from kernelopt.sandbox import outbox, rules
from kernelopt.sandbox.device import machine_memory_bytes
from kernelopt.sandbox.process import (HostOutOfRoom, MachineOutOfMemory, WorkerDied, WorkerProcess, WorkerTimeout,
                                      host_memory_room, host_resident_bytes)
from kernelopt.sandbox.records import InputSet, input_sets
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

    def send(self, worker: WorkerProcess, message: dict, blobs: list[bytes] | None = None) -> None:
        try:
            worker.send(message, blobs or (), deadline=self.deadline)
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

    # -- failures ---------------------------------------------------------------------------

    def fail(self, worker: WorkerProcess, reply: dict) -> None:
        if worker is self.reference:
            raise reference_failure(self.problem, str(reply.get("error", "unknown error")))
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

    def make_inputs(self, seeds: list[int]) -> list[InputSet]:
        """Input sets made by the reference worker (trusted code only) for the host's seeds. Its
        group is frozen again at once: left thawed, whatever its process still does after the
        answer (freeing the sets) ran beside the candidate's calls when the candidate's turn came
        first, and only then (an exact copy read 0.8x in containers, whose calls the wall clock
        times)."""
        message = commands.inputs(seeds)
        request = self._outbox_request(len(seeds))
        if request is not None:
            message["outbox"] = request
        reply, blobs = self.ask(self.reference, message)
        self.reference.freeze()
        outbox = self.reference.outbox if request is not None else None
        if outbox is not None:
            try:
                self.reference.claim_room(_outbox_bytes(reply))
            except HostOutOfRoom as exc:
                raise self.attribute(self.reference, exc) from None
        sets = input_sets(self.problem, seeds, reply, blobs, outbox.take if outbox is not None else None)
        self.reference.set_bytes = max([self.reference.set_bytes, *(len(s.packed) for s in sets)])
        return sets

    def _outbox_request(self, count: int) -> dict | None:
        """What an `inputs` message says of the reference's outbox (outbox.py) for `count` sets:
        None until the sets' size is known, where the worker takes no descriptors (a container)
        or the host has no room; a new, larger outbox when the one it has is too small."""
        worker = self.reference
        if not worker.takes_descriptors or not worker.set_bytes:
            return None
        wanted = min(outbox.wanted_bytes(worker.set_bytes, count), outbox.OUTBOX_LIMIT_BYTES)
        if wanted < outbox.wanted_bytes(worker.set_bytes, 1):
            return None  # a single set larger than the limit: blobs
        if worker.outbox is not None and worker.outbox.size >= wanted:
            return {"size": worker.outbox.size, "new": False}
        if host_memory_room(wanted) < wanted:
            return None
        worker.replace_outbox(outbox.Outbox(wanted))
        return {"size": wanted, "new": True}

    def collect_labels(self, findings: rules.Findings | None = None) -> None:
        """Ask the candidate what it built and changed, and the guard's findings, between phases
        (its group thawed for the exchange, outside any call, then frozen again). Advisory: it
        labels the verdict's optimization kinds; the guard's findings are enforced as before."""
        reply, _ = self.ask(self.candidate, commands.labels())
        self.candidate.freeze()
        self.remember_labels(reply)
        violations = reply.get("violations")
        rules.enforce(rules.guard_findings(violations if isinstance(violations, list) else []), findings)


def _outbox_bytes(reply: dict) -> int:
    """The bytes of the sets a reply to `inputs` says it put in the outbox (input_sets checks
    each against the outbox)."""
    sets = reply.get("sets")
    return sum(meta["nbytes"] for meta in (sets if isinstance(sets, list) else [])
               if isinstance(meta, dict) and "at" in meta and isinstance(meta.get("nbytes"), int) and meta["nbytes"] > 0)

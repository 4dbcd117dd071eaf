"""The referee's plain records: what the workers report per call and per run, the input sets the
reference makes, the reference's trial results, and each side's part of a timed round.

Records hold data only. The rules (sandbox/rules/) are functions of them; the conversation
(sandbox/conversation.py) makes them from the workers' replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from pydantic import BaseModel

from kernelopt.kernelbench import Problem, ProblemError


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

    def bytes_per_call(self) -> int:
        """The most one call's inputs and outputs take (1 when nothing is known)."""
        if not self.calls:
            return 1
        return max(call.input_bytes + self.output_bytes(i) for i, call in enumerate(self.calls))

    def subset(self, indices: list[int]) -> ReferenceTrials:
        return ReferenceTrials(calls=[self.calls[i] for i in indices], outputs=[self.outputs[i] for i in indices],
                               inputs=[self.inputs[i] for i in indices])


def joined(first: ReferenceTrials | None, more: ReferenceTrials | None) -> ReferenceTrials | None:
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
    # Per call, the host clock's ms between the call's start and end marks: the program's call
    # alone, no harness work (empty where not measured)
    marked_ms: list[float] = field(default_factory=list)
    # Per call, the host clock's ms from the call's end (as the worker read the clock) to its end
    # mark's arrival on the host
    arrival_ms: list[float] = field(default_factory=list)
    # Per call, the host clock's ms over the harness's steps outside the call (before its start
    # mark, after the host's word on its end mark): where the host's marks are read, this is the
    # overhead the check around the call compares, free of the host's own waits for the marks
    harness_ms: list[float] = field(default_factory=list)

    @property
    def overhead_ms(self) -> float:
        """Per call, what the host clock saw beyond the call: the harness's steps around it where
        the marks were read, else the host's bracket beyond the worker's own timer."""
        return sum(per_call_overheads([self])) / len(self.timer_ms)


# A timed round: the (candidate, reference) sides.
Round = tuple[SideRound, SideRound]


def per_call_overheads(sides: list[SideRound]) -> list[float]:
    """Per call, the host clock's ms outside the call: over the harness's steps around it where
    the marks were read (`harness_ms`), else beyond the worker's timer. Calls pair up across the
    two sides (the same round, the same inputs), so their differences compare like with like."""
    return [over for side in sides for over in (
        side.harness_ms if len(side.harness_ms) == len(side.timer_ms) and side.harness_ms
        else [host - timer for host, timer in zip(side.host_ms, side.timer_ms)])]


def per_call_gaps(sides: list[SideRound]) -> list[float]:
    """Per call, the host clock's ms between the call's marks beyond the worker's timer: what
    the host saw of the call that the worker's own timer did not report."""
    return [marked - timer for side in sides for marked, timer in zip(side.marked_ms, side.timer_ms)]


def with_calls(report: dict, records: list[dict]) -> dict:
    """A run's report with the records its calls' answers carried, as the run is parsed.
    The records come from the answers, never from the report: by the report, the program
    has had its chances to run again."""
    return {**report, "calls": records}


def input_sets(problem: Problem, seeds: list[int], reply: dict, blobs: list[bytes]) -> list[InputSet]:
    """The reference worker's answer to `inputs` for `seeds`, one InputSet per seed."""
    sets = reply.get("sets")
    if not isinstance(sets, list) or len(sets) != len(seeds) or len(blobs) != len(seeds):
        raise ProblemError(problem.path, "the reference worker sent too few input sets")
    return [InputSet(seed=seed, spec=meta.get("spec"), digest=str(meta.get("digest")), packed=blob)
            for seed, meta, blob in zip(seeds, sets, blobs)]

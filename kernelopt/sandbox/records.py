"""The referee's plain records: what a worker's call answer says, each call as the host took it,
the input sets the reference makes, the reference's trial results, and each side's part of a
timed round.

Records hold data only. The rules (sandbox/rules/) are functions of them; the conversation
(sandbox/conversation.py) makes them from the workers' replies.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel

from kernelopt.kernelbench import Problem, ProblemError


class CallReply(BaseModel):
    """A worker's answer to a call, validated (untrusted from a candidate): where its outputs
    are, and what it says of them. The host compares only the values it reads itself."""

    called: int
    structure: str
    aliases_input: bool = False
    meta: list[tuple[list[int], str, str]]
    spans: list[tuple[int, list[int]]] | None = None  # commands.MEMORY: each output's address and strides
    slot_spans: list[tuple[int, int]] | None = None  # commands.DEVICE: each output's offset and bytes in the slot


@dataclass
class CallRecord:
    """One call as the host took it: its times on the host's clocks (`ms` decides: the group's
    CPU time on a CPU where the kernel keeps it, else the wall clock), its outputs' shapes,
    dtypes and devices, their structure, and what the host found of its inputs."""

    seed: int
    ms: float
    wall_ms: float
    cpu_ms: float | None
    meta: list[tuple[list[int], str, str]]
    blocked_ms: float | None = None  # with the CPU clock: the window's time neither running nor runnable
    structure: str = "T"
    aliases_input: bool = False
    inputs_changed: bool = False  # the input slot no longer held what the host wrote
    input_bytes: int = 0
    # The host's time around the call, ms: placing its inputs, thaw to answer, the freeze, and
    # the keeper's take of its outputs (device slots; 0 elsewhere).
    steps_ms: dict[str, float] = field(default_factory=dict)
    # The keeper's idle probe of the device just before the window (device slots only): a short
    # kernel's time, long where another context held the device (keeper.py).
    device_probe_ms: float | None = None
    # Device slots: bytes of the outputs sampled as the window ended that had changed by the
    # keeper's copy just after (work left running on the device past the window).
    late_writes: int = 0


@dataclass
class InputSet:
    """One call's inputs as the reference worker made them: packed bytes the host hands to a
    worker for exactly one call, and the spec that unpacks them."""

    seed: int
    spec: object
    packed: bytes

    def digest(self) -> str:
        """SHA-256 of the spec and the packed values, taken on the host where it is needed (the
        every-element check, for sets it makes again from their seeds): computed for every set
        in the reference worker it was a quarter of a large set's making."""
        h = hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode())
        h.update(self.packed)
        return h.hexdigest()


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
    """One worker's calls in one timed round, each on the host's clocks: `ms`, what decides
    (CallRecord.ms), the wall clock's and the group's CPU time per call; over the turn, the
    sums of the calls' windows (the census's parallelism check)."""

    ms: list[float]
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    blocked_ms: list[float] = field(default_factory=list)  # per call, where the CPU time decides
    device_probe_ms: list[float] = field(default_factory=list)  # per call, with device slots (CallRecord)

    @property
    def turn_s(self) -> float:
        return sum(self.wall_ms) / 1e3

    @property
    def cpu_s(self) -> float | None:
        return sum(self.cpu_ms) / 1e3 if self.cpu_ms and len(self.cpu_ms) == len(self.wall_ms) else None


# A timed round: the (candidate, reference) sides.
Round = tuple[SideRound, SideRound]


def input_sets(problem: Problem, seeds: list[int], reply: dict, blobs: list[bytes],
               take: Callable[[object, object], bytes | None] | None = None) -> list[InputSet]:
    """The reference worker's answer to `inputs` for `seeds`, one InputSet per seed: each set
    either in the host's outbox (`take` copies it out by the reply's offset and size) or, in
    order, one of the reply's blobs."""
    sets = reply.get("sets")
    if not isinstance(sets, list) or len(sets) != len(seeds):
        raise ProblemError(problem.path, "the reference worker sent too few input sets")
    remaining = iter(blobs)
    made = []
    for seed, meta in zip(seeds, sets):
        meta = meta if isinstance(meta, dict) else {}
        if "at" in meta:
            packed = take(meta["at"], meta.get("nbytes")) if take is not None else None
            if packed is None:
                raise ProblemError(problem.path, "the reference worker put an input set outside its outbox")
        else:
            packed = next(remaining, None)
            if packed is None:
                raise ProblemError(problem.path, "the reference worker sent too few input sets")
        made.append(InputSet(seed=seed, spec=meta.get("spec"), packed=packed))
    if next(remaining, None) is not None:
        raise ProblemError(problem.path, "the reference worker sent more input sets than asked for")
    return made

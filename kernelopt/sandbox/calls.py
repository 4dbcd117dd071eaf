"""The host's side of one call: the window the candidate runs in, clocked and read from outside.

A worker's group is frozen between calls (the kernel's freezer: no thread of it runs). For a
call the host places the inputs (in the worker's input slot, while it is frozen), reads the
group's CPU clock, starts the wall clock, thaws the group and sends the call frame; the worker
runs the program once and answers with where its outputs are; the host freezes the group again,
waits until the kernel says it is frozen, reads both clocks, and only then takes the outputs:
from the frozen process's memory itself (commands.MEMORY, process_memory.py), or from the
answer's blobs (commands.FRAME). So:

- everything the group does while a call's inputs are visible to it is on the clocks, its
  threads and processes included (the group's CPU time), and at every other moment after load
  it is frozen (docs/referee.md, "The call's window");
- nothing the verdict uses is computed or kept by the worker: not its times, not a fingerprint,
  not a copy of an output. What the answer says (shapes, structure, addresses) only tells the
  host where to look, and a lie there can only cost the program its verdict;
- both sides run the same loop, so its cost is in both times and nothing is allowed or charged
  for it.

Which clock decides (`CallRecord.ms`): on a CPU, the group's CPU time where the kernel keeps it
(a busy machine that preempts a worker does not move it), and beside it the time the call spent
blocked (`CallRecord.blocked_ms`: the window to the answer less the CPU time and less the time the
worker's thread waited for a core, both the kernel's accounting), of which the candidate is held
to its median beyond the reference's (timing/means.py): a call that sleeps or waits is not faster for
it. Elsewhere the wall clock, to the answer where the outputs travelled in it, to the freeze where
the host reads them from memory.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from dataclasses import dataclass

import torch
from pydantic import ValidationError

from kernelopt.sandbox import rules
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.compare import Comparison
from kernelopt.sandbox.device_slots import KeeperError, OnDevice, Taken, WorkerSlots
from kernelopt.sandbox.process import SandboxError, WorkerProcess, host_memory_room, runqueue_wait_ms
from kernelopt.sandbox.process_memory import ProcessMemory, UnreadableMemory
from kernelopt.sandbox.records import CallRecord, CallReply, InputSet
from kernelopt.sandbox.worker import commands
from kernelopt.sandbox.worker.transfer import contiguous_layout

_DTYPES = {str(d): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


class OutputsUnreadable(ValueError):
    """What a call's answer says of its outputs does not lead to values the host can read."""


@dataclass
class Call:
    """One call as the host took it: its record and its outputs (host-owned CPU tensors). In
    the timed rounds with device slots the outputs may stay with the keeper instead (then
    `outputs` is empty): kept there under the key `kept`, or already compared there with the
    other side's (`comparison`, the same Comparison the host's code gives)."""

    record: CallRecord
    outputs: list[torch.Tensor]
    kept: str | None = None
    comparison: Comparison | None = None


def transport_for(workers: list[WorkerProcess], device: str) -> str:
    """How the workers' inputs and outputs travel (the same for both sides of an evaluation, so
    their windows hold the same harness work): through device slots where a keeper made them
    for every worker (a GPU: device_slots.py), read from memory on a CPU where the host can read
    every worker's, else sent in the answers."""
    if all(w is not None and w.slots is not None for w in workers):
        return commands.DEVICE
    if device == "cpu" and all(w is not None and w.memory is not None and w.inputs is not None for w in workers):
        return commands.MEMORY
    return commands.FRAME


def run_call(conversation: Conversation, worker: WorkerProcess, input_set: InputSet, *, transport: str,
             at: int = 0, pin_cpu: int | None = None, device: str = "cpu", check_inputs: bool = False,
             on_device: OnDevice | None = None) -> Call:
    """One call's window in `worker` (module docstring). A failure the worker reports, its
    death or its silence becomes the candidate's verdict (the problem's, for the reference).
    With `check_inputs`, whether the call wrote into its inputs (the input slot, compared by the
    host with what it placed there; the trials' input-mutation rule). With `on_device` (device
    slots only), what the keeper does with the outputs instead of sending them here, where the
    answer put them in the slot (Call)."""
    if not worker.frozen:
        worker.freeze()  # every window starts from a frozen group: both sides wake the same way
    slots = worker.slots if transport == commands.DEVICE else None
    placing = time.perf_counter()
    placed, probe_ms = _place(conversation, worker, slots, input_set, at)
    message = {**commands.call(input_set.seed, input_set.spec, transport=transport, pin_cpu=pin_cpu), **placed}
    cpu_clock = device == "cpu" and worker.cheap_cpu_clock
    cpu_before = worker.cpu_seconds() if cpu_clock else None
    waited_before = worker.runqueue_wait_ms() if cpu_clock else None
    host_waited_before = host_runqueue_wait_ms() if cpu_clock else None
    began = time.perf_counter()
    worker.thaw()
    conversation.send(worker, message, [] if placed else [input_set.packed])
    reply, blobs = conversation.receive(worker)
    answered = time.perf_counter()
    # The host's own wait for a core up to the answer, not past it: what it waits while freezing
    # the worker and reading the clocks lies outside the window, and left out of the call's
    # blocked time it would hide as much of a sleep (CI saw a 3 ms sleep read 2.2 ms blocked).
    host_waited_after = host_runqueue_wait_ms() if cpu_clock else None
    # The worker's wait for a core up to the answer too: after answering it may wait for the
    # core it shares with the host's late read, and counted past the answer that wait was
    # taken from the window twice (a 3 ms sleep read near 0 ms blocked now and then).
    waited_after = worker.runqueue_wait_ms() if cpu_clock else None
    worker.freeze()
    frozen = time.perf_counter()
    cpu_after = worker.cpu_seconds() if cpu_clock else None
    parsed = _parse(conversation, worker, reply, input_set.seed)
    end, device_inputs_held, comparison = frozen if transport == commands.MEMORY else answered, None, None
    late_writes = 0
    # Outputs stay with the keeper only where the answer put them in the device slot.
    step = (dataclasses.replace(on_device, layouts=tuple((list(m[0]), m[1]) for m in parsed.meta))
            if on_device is not None and slots is not None and parsed.slot_spans is not None else None)
    kept = None
    try:
        if slots is not None:
            check = (at, len(input_set.packed)) if check_inputs and placed else None
            taken = _take_from_slots(slots, parsed, blobs, check, end, step)
            end, device_inputs_held, comparison = taken.at, taken.inputs_held, taken.comparison
            late_writes = taken.late_writes
            kept = step.keep if step is not None and taken.kept else None
        stays = kept is not None or comparison is not None
        outputs, aliased = ([], parsed.aliases_input) if stays else take_outputs(worker, parsed, blobs, transport)
    except OutputsUnreadable as exc:
        if worker is conversation.reference:
            conversation.protocol_error(worker, f"readable outputs ({exc})")
        rules.enforce(rules.unusable_outputs(exc))
        raise
    wall_ms = (end - began) * 1e3
    cpu_ms = (cpu_after - cpu_before) * 1e3 if cpu_before is not None and cpu_after is not None else None
    blocked_ms = None
    if cpu_ms is not None and waited_before is not None and waited_after is not None:
        # The window to the answer less the time the worker's thread waited for a core (preemption)
        # and the group's CPU time: what it spent blocked (sleeping, waiting on a pipe or a lock).
        # Less the time this thread of the host waited for a core in the window too: an answer
        # the host is slow to read is no time the worker spent blocked (on a busy machine that
        # latency was most of the "blocked" time of honest calls, and fell unevenly on the sides).
        host_wait = (host_waited_after - host_waited_before
                     if host_waited_before is not None and host_waited_after is not None else 0.0)
        blocked_ms = max(0.0, (answered - began) * 1e3 - (waited_after - waited_before) - cpu_ms - host_wait)
    else:
        cpu_ms = None  # without the blocked time the CPU clock would miss a call that sleeps: the wall decides
    changed = check_inputs and worker.inputs is not None and bool(placed) and \
        (not worker.inputs.holds(input_set.packed, at) or device_inputs_held is False)
    # Where the host's time around the window went (diagnostics: benchmarks/call_trace.py).
    steps = {"place": began - placing, "answer": answered - began, "freeze": frozen - answered,
             "take": end - frozen if end > frozen else 0.0}
    record = CallRecord(seed=input_set.seed, ms=cpu_ms if cpu_ms is not None else wall_ms, wall_ms=wall_ms,
                        cpu_ms=cpu_ms, blocked_ms=blocked_ms, meta=[(list(m[0]), m[1], m[2]) for m in parsed.meta],
                        structure=parsed.structure, aliases_input=aliased, inputs_changed=changed,
                        input_bytes=len(input_set.packed), steps_ms={k: v * 1e3 for k, v in steps.items()},
                        device_probe_ms=probe_ms, late_writes=late_writes)
    return Call(record=record, outputs=outputs, kept=kept,
                comparison=Comparison(**comparison) if comparison is not None else None)


def host_runqueue_wait_ms() -> float | None:
    """How long this thread of the host has waited for a core so far (ms), or None where the
    kernel does not say."""
    return runqueue_wait_ms("/proc/thread-self/schedstat")


def _parse(conversation: Conversation, worker: WorkerProcess, reply: dict, seed: int) -> CallReply:
    try:
        parsed = CallReply.model_validate(reply)
    except ValidationError as exc:
        if worker is conversation.reference:
            raise
        rules.enforce(rules.invalid_call_reply(list(exc.errors()) or ["invalid"]))
        raise
    if parsed.called != seed:
        if worker is conversation.reference:
            conversation.protocol_error(worker, "the answer to the call sent")
        rules.enforce(rules.invalid_call_reply([f"answered call {parsed.called}, not {seed}"]))
    return parsed


def take_outputs(worker: WorkerProcess, reply: CallReply, blobs: list[bytes],
                 transport: str) -> tuple[list[torch.Tensor], bool]:
    """The call's outputs as host-owned CPU tensors, and whether one of them lies in the input
    slot (an output that is a view of an input). Read from the frozen worker's memory where the
    answer names addresses, else from the answer's blobs."""
    layouts = [_layout(meta) for meta in reply.meta]
    if reply.slot_spans is not None and worker.slots is not None:
        return _from_slot(worker.slots, layouts, [size for _, size in reply.slot_spans]), reply.aliases_input
    if transport == commands.MEMORY:
        if worker.memory is None or reply.spans is None or len(reply.spans) != len(layouts):
            raise OutputsUnreadable("the answer does not say where every output is")
        return _from_memory(worker.memory, layouts, reply.spans)
    if len(blobs) != len(layouts):
        raise OutputsUnreadable(f"{len(blobs)} output blob(s) for {len(layouts)} output(s)")
    outputs = []
    for (shape, dtype), blob in zip(layouts, blobs):
        numel = math.prod(shape)
        if len(blob) != numel * dtype.itemsize:
            raise OutputsUnreadable(f"an output blob of {len(blob)} bytes for {numel} values of {dtype}")
        outputs.append(_from_bytes(blob, dtype, shape))
    return outputs, reply.aliases_input


def _place(conversation: Conversation, worker: WorkerProcess, slots: WorkerSlots | None, input_set: InputSet,
           at: int) -> tuple[dict, float | None]:
    """The call's inputs in the worker's input slot (and, with device slots, copied by the keeper
    into its device input slot, remade first where they do not fit): what the call frame says
    of where they are (empty: they travel as the frame's blob), and the keeper's idle probe of
    the device just before the window (ms; None without device slots)."""
    size = len(input_set.packed)
    # The device slot mirrors the input slot's offsets; a set the input slot cannot hold travels
    # as the frame's blob and needs no device slot of its size.
    if slots is not None and worker.slot_holds(at + size) and slots.stale(at + size):
        _remake_slots(conversation, worker, slots, at + size)
    placed = worker.place_inputs(input_set.packed, at)
    probe_ms = None
    if slots is not None and placed:
        probe_ms = keeper_step(lambda: slots.place(at, size))
    return placed, probe_ms


def _take_from_slots(slots: WorkerSlots, reply: CallReply, blobs: list[bytes], check_inputs: tuple[int, int] | None,
                     answered: float, on_device: OnDevice | None) -> Taken:
    """With the worker frozen, the keeper copies the outputs its answer locates in the device
    output slot out: the window ends when it has them (any work the worker left running on the
    device is then either done or wrong in them). Outputs that did not fit came as blobs (the
    window ends at the answer) and size the next call's slot. Also whether the device input slot
    still held the inputs, when asked (None otherwise), and the keeper's comparison where
    `on_device` asked for one."""
    if reply.slot_spans is None:
        # Sized by the bytes that came (the host holds them), not by what the answer claims.
        slots.outputs_wanted = max(slots.outputs_wanted, sum(len(blob) for blob in blobs) + 256 * len(blobs))
        return Taken(answered, None)
    _check_slot_spans(reply, slots.outputs_size)
    return keeper_step(lambda: slots.take(reply.slot_spans or [], check_inputs, on_device))


def kept_outputs(worker: WorkerProcess, call: Call) -> list[torch.Tensor]:
    """The outputs of `call` (one of `worker`'s) that the keeper kept, brought to the host after
    all: the other side's call on the same inputs could not be compared on the device."""
    slots = worker.slots
    if slots is None or call.kept is None:
        raise ValueError("no outputs of this call are kept")
    layouts = [_layout(meta) for meta in call.record.meta]
    sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in layouts]
    keeper_step(lambda: slots.give(call.kept or "", sum(sizes)))
    return _from_slot(slots, layouts, sizes)


def _check_slot_spans(reply: CallReply, slot_size: int) -> None:
    """The answer's spans lie in the slot and match the outputs' shapes and dtypes (checked
    before the keeper copies anything: the answer is the program's)."""
    layouts = [_layout(meta) for meta in reply.meta]
    spans = reply.slot_spans or []
    if len(spans) != len(layouts):
        raise OutputsUnreadable("the answer does not say where every output is")
    for (shape, dtype), (offset, size) in zip(layouts, spans):
        if size != math.prod(shape) * dtype.itemsize:
            raise OutputsUnreadable("the bytes the answer gives an output do not match its shape and dtype")
        if offset < 0 or offset + size > slot_size:
            raise OutputsUnreadable(f"an output at bytes {offset}..{offset + size} of a {slot_size}-byte slot")
    # The loop copies each output to a place of its own; spans that overlap could add up to more
    # than the slot, which the keeper's copy-out is sized for.
    placed = sorted((offset, offset + size) for offset, size in spans if size)
    for (_, end), (start, _) in zip(placed, placed[1:]):
        if start < end:
            raise OutputsUnreadable("the answer puts two outputs in the same bytes of the slot")


def _from_slot(slots: WorkerSlots, layouts: list[tuple[list[int], torch.dtype]],
               sizes: list[int]) -> list[torch.Tensor]:
    """The outputs the keeper copied, one after another (`sizes` bytes each), into the host's
    output buffer."""
    raw = slots.output_bytes(sum(sizes))
    outputs, offset = [], 0
    for (shape, dtype), size in zip(layouts, sizes):
        if size:  # torch's copy, on the host's threads: half the time of a bytearray's (a 67 MB output: 17 ms)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # frombuffer warns of a read-only view; the clone owns its bytes
                flat = torch.frombuffer(raw, dtype=torch.uint8, count=size, offset=offset).clone()
            outputs.append(flat.view(dtype).reshape(shape))
        else:
            outputs.append(torch.empty(shape, dtype=dtype))
        offset += size
    return outputs


def _remake_slots(conversation: Conversation, worker: WorkerProcess, slots: WorkerSlots, input_bytes: int) -> None:
    """New device slots for `worker` that fit this call (an exchange outside any window: no
    call's inputs are in them yet), then the group frozen again. Slots the keeper cannot make
    (the device is full) fail the candidate, whose memory fills it, or the run for the reference."""
    try:
        message, fds = slots.remake(input_bytes)
    except KeeperError as exc:
        if worker is conversation.reference:
            raise SandboxError(f"the device slots' keeper failed: {exc}") from None
        rules.enforce(rules.unusable_outputs(OutputsUnreadable(f"its device slots could not be made ({exc})")))
        raise
    try:
        worker.send_descriptors(fds)
    finally:
        for fd in fds:
            os.close(fd)
    conversation.ask(worker, message)
    worker.freeze()


def keeper_step(step):
    """A step of the keeper's. Everything it is asked is checked first, so its failure is the
    referee's own machinery failing, never a candidate's verdict."""
    try:
        return step()
    except KeeperError as exc:
        raise SandboxError(f"the device slots' keeper failed: {exc}") from None


def _layout(meta: tuple[list[int], str, str]) -> tuple[list[int], torch.dtype]:
    shape, dtype_name, _device = meta
    dtype = _DTYPES.get(dtype_name)
    if dtype is None or any(n < 0 for n in shape):
        raise OutputsUnreadable(f"an output of dtype {dtype_name!r} and shape {shape}")
    return shape, dtype


def _from_memory(memory: ProcessMemory, layouts: list[tuple[list[int], torch.dtype]],
                 spans: list[tuple[int, list[int]]]) -> tuple[list[torch.Tensor], bool]:
    """Each output read from the worker's memory, its values laid out contiguously, once the
    host has room for all of them; and whether any lies in the input slot's mapping."""
    for index, ((shape, _), (_, stride)) in enumerate(zip(layouts, spans)):
        if not contiguous_layout(shape, stride):
            # The worker lays every output out contiguously inside the window (measure.laid_out):
            # laid out here, a transpose's strided copy or a broadcast's values would be the
            # host's work, off the clock, and a 4-byte answer could claim gigabytes.
            raise OutputsUnreadable(f"output {index} is not laid out contiguously (strides {stride} for shape {shape})")
    extents = [math.prod(shape) * dtype.itemsize for shape, dtype in layouts]  # contiguous: all they span
    needed = sum(extents)
    room = host_memory_room(needed)
    if needed > room:
        raise OutputsUnreadable(f"its outputs span {needed / 2**30:.2f} GiB, more than the host has room for "
                                f"({room / 2**30:.2f} GiB)")
    outputs, aliased = [], False
    for (shape, dtype), (address, _), nbytes in zip(layouts, spans, extents):
        if nbytes == 0:
            outputs.append(torch.empty(shape, dtype=dtype))
            continue
        try:
            raw = memory.read(address, nbytes)
        except UnreadableMemory as exc:
            raise OutputsUnreadable(str(exc)) from None
        outputs.append(torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape))
        aliased |= memory.in_slot(address, address + nbytes)
    return outputs, aliased


def _from_bytes(blob: bytes | bytearray, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    if not blob:
        return torch.empty(shape, dtype=dtype)
    buffer = blob if isinstance(blob, bytearray) else bytearray(blob)  # host-owned and writable
    return torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).reshape(shape)

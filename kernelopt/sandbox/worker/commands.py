"""The worker protocol's commands, defined once (standard library only).

The host (sandbox/conversation.py, batch.probe_reference) builds every message with these
builders, and the worker (worker/main.py) dispatches on the same names through a table. Each
message is a JSON frame (wire.py); `call` and `profile` frames carry one call's packed inputs
in the input slot or as the frame's blob.

    load     the problem (and the candidate) from the scratch directory; the model from the init seed
    inputs   the reference only: one input set per seed, with its spec: in the host's outbox where
             the message names one (sandbox/outbox.py), else as the reply's blobs
    call     one call's window: its inputs (in the input slot, or the frame's blob), run once, and
             the outputs described for the host to take (read from memory, or sent as blobs)
    labels   what the program built and changed, and the guard's findings (advisory)
    profile  the advisory profiling pass on one input set (after a correct verdict)
    ping     a warm worker shows that it is in step with the host
    slots    map the device slots whose descriptors come beside the frame (sandbox/device_slots.py)
    quit     the worker exits
    built    the host's answer to a candidate's build request (sent while it loads)

The host thaws a worker's group for a call and freezes it again once the call's answer is in,
before it reads anything (sandbox/calls.py): the worker runs no step of its own outside a call
that the verdict depends on.

A failure reply carries "ok": false, one of FAILURE_KINDS and "error"; the host maps each kind
through the referee's rules (sandbox/rules/).
"""

from __future__ import annotations

LOAD, INPUTS, CALL, LABELS, PROFILE, PING, SLOTS, QUIT, BUILT = (
    "load", "inputs", "call", "labels", "profile", "ping", "slots", "quit", "built")
# The commands a worker answers (quit ends it; built only answers a build request).
COMMANDS = (LOAD, INPUTS, CALL, LABELS, PROFILE, PING, SLOTS)
# How a call's inputs and outputs travel: the host reads the outputs from the frozen worker's
# memory (MEMORY), they come as the answer's blobs (FRAME), or both lie in device slots that a
# trusted keeper fills and empties while the worker is frozen (DEVICE).
MEMORY, FRAME, DEVICE = "memory", "frame", "device"

# What a worker's failure reply may say went wrong.
COMPILE_ERROR, RUNTIME_ERROR, PROBLEM_ERROR = "compile_error", "runtime_error", "problem_error"
BAD_OUTPUT, PROTOCOL = "bad_output", "protocol"
FAILURE_KINDS = (COMPILE_ERROR, RUNTIME_ERROR, PROBLEM_ERROR, BAD_OUTPUT, PROTOCOL)


def load(*, device: str, init_seed: int, host_builds: bool, problem_path: str,
         candidate_path: str | None = None) -> dict:
    message = {"cmd": LOAD, "device": device, "init_seed": init_seed, "host_builds": host_builds,
               "problem_path": problem_path}
    if candidate_path is not None:
        message["candidate_path"] = candidate_path
    return message


def inputs(seeds: list[int]) -> dict:
    return {"cmd": INPUTS, "seeds": list(seeds)}


def call(seed: int, spec: object, *, transport: str = FRAME, pin_cpu: int | None = None) -> dict:
    """One call's window. Every call frame has the same keys, whether the host will compare the
    call in full or time it (it compares every one): its shape tells the program nothing."""
    return {"cmd": CALL, "seed": seed, "spec": spec, "transport": transport, "pin_cpu": pin_cpu}


def slots(kind: str, inputs: int, outputs: int, device_index: int = 0) -> dict:
    """Map the device slots (input, output) whose descriptors the host sends beside this frame."""
    return {"cmd": SLOTS, "kind": kind, "inputs": inputs, "outputs": outputs, "device_index": device_index}


def labels() -> dict:
    return {"cmd": LABELS}


def profile(seed: int, spec: object, *, budget_s: float, count_work: bool, ncu: bool) -> dict:
    return {"seed": seed, "spec": spec, "cmd": PROFILE, "budget_s": budget_s, "count_work": count_work, "ncu": ncu}


def ping(token: object) -> dict:
    return {"cmd": PING, "token": token}


def quit_() -> dict:
    return {"cmd": QUIT}


def built(ok: bool, **fields: object) -> dict:
    return {"cmd": BUILT, "ok": ok, **fields}


def failure(kind: str, error: str, **fields: object) -> dict:
    """A worker's failure reply."""
    return {"ok": False, "kind": kind, "error": error, **fields}

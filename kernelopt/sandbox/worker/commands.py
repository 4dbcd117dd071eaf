"""The worker protocol's commands, defined once (standard library only).

The host (sandbox/conversation.py, batch.probe_reference) builds every message with these
builders, and the worker (worker/main.py) dispatches on the same names through a table. Each
message is a JSON frame (wire.py); `call` and `profile` frames carry one call's packed inputs
in the input slot or as the frame's blob.

    load     the problem (and the candidate) from the scratch directory; the model from the init seed
    inputs   the reference only: one input set per seed (blobs), with its spec and digest
    run      `count` calls follow, each a `call` frame answered with the call's record; then `report`
    call     one call's inputs (seed, spec)
    report   the run's labels and the guard's findings
    fetch    one retained output of the last run (the sampled full comparison)
    profile  the advisory profiling pass on one input set (after a correct verdict)
    ping     a warm worker shows that it is in step with the host
    quit     the worker exits
    built    the host's answer to a candidate's build request (sent while it loads)
    marked   the host read a call's start or end mark (each call's marks precede its record: the
             host's clocks bracket the call; after each mark the worker waits for this)

A failure reply carries "ok": false, one of FAILURE_KINDS and "error"; the host maps each kind
through the referee's rules (sandbox/rules/).
"""

from __future__ import annotations

LOAD, INPUTS, RUN, CALL, REPORT, FETCH, PROFILE, PING, QUIT, BUILT, MARKED = (
    "load", "inputs", "run", "call", "report", "fetch", "profile", "ping", "quit", "built", "marked")
MARK_START, MARK_END = "start", "end"  # a call's marks, in this order, before its record
# The commands a worker answers (quit ends it; built only answers a build request).
COMMANDS = (LOAD, INPUTS, RUN, FETCH, PROFILE, PING)

# What a worker's failure reply may say went wrong.
COMPILE_ERROR, RUNTIME_ERROR, PROBLEM_ERROR = "compile_error", "runtime_error", "problem_error"
BAD_OUTPUT, INTERCEPTION, PROTOCOL = "bad_output", "interception", "protocol"
HARNESS_OBJECT = "harness_object"  # an object the harness copies, hashes or serializes was not plain
FAILURE_KINDS = (COMPILE_ERROR, RUNTIME_ERROR, PROBLEM_ERROR, BAD_OUTPUT, INTERCEPTION, PROTOCOL, HARNESS_OBJECT)

# Keys of the run command: which facts each call's record carries, and how the calls run. Every
# run header carries all of them (these defaults where the host names none), so that the header's
# shape does not tell a correctness trial from a timed call (docs/referee.md, behaving differently
# when timed); their values still differ, and the timed calls' input-dependence test covers that.
RUN_DEFAULTS: dict[str, object] = {"hash_inputs": False, "return_outputs": False, "fingerprints": True,
                                   "retain": False, "pin_cpu": None}
RUN_FLAGS = tuple(RUN_DEFAULTS)


def load(*, device: str, init_seed: int, fingerprint_seed: int, host_builds: bool, problem_path: str,
         candidate_path: str | None = None) -> dict:
    message = {"cmd": LOAD, "device": device, "init_seed": init_seed, "fingerprint_seed": fingerprint_seed,
               "host_builds": host_builds, "problem_path": problem_path}
    if candidate_path is not None:
        message["candidate_path"] = candidate_path
    return message


def inputs(seeds: list[int]) -> dict:
    return {"cmd": INPUTS, "seeds": list(seeds)}


def run(count: int, **flags: object) -> dict:
    unknown = set(flags) - set(RUN_FLAGS)
    if unknown:
        raise ValueError(f"unknown run flag(s) {sorted(unknown)}; known: {list(RUN_FLAGS)}")
    return {"cmd": RUN, "count": count, **RUN_DEFAULTS, **flags}


def call(seed: int, spec: object) -> dict:
    return {"cmd": CALL, "seed": seed, "spec": spec}


def marked() -> dict:
    return {"cmd": MARKED}


def report() -> dict:
    return {"cmd": REPORT}


def fetch(index: int) -> dict:
    return {"cmd": FETCH, "index": index}


def profile(seed: int, spec: object, *, budget_s: float, count_work: bool, ncu: bool) -> dict:
    return {**call(seed, spec), "cmd": PROFILE, "budget_s": budget_s, "count_work": count_work, "ncu": ncu}


def ping(token: object) -> dict:
    return {"cmd": PING, "token": token}


def quit_() -> dict:
    return {"cmd": QUIT}


def built(ok: bool, **fields: object) -> dict:
    return {"cmd": BUILT, "ok": ok, **fields}


def failure(kind: str, error: str, **fields: object) -> dict:
    """A worker's failure reply."""
    return {"ok": False, "kind": kind, "error": error, **fields}

"""Rules on what a worker replies: its failure kinds, the guard's findings and the protocol's frames."""

from __future__ import annotations

from kernelopt.sandbox.rules.registry import RULES, Verdict, known_flag, make_verdict, rule
from kernelopt.sandbox.worker import commands


# -- the worker's failure kinds -------------------------------------------------------------

@rule("output_not_plain_tensor", status="rejected", flag="output_not_plain_tensor",
      family="lazy tensor subclasses, non-tensor outputs", example="hacks/output_python_list.py")
def output_not_plain_tensor(reply: dict) -> Verdict | None:
    """An output is not a plain torch.Tensor (`type(x) is torch.Tensor`, checked in the worker)."""
    return _failure(reply, commands.BAD_OUTPUT, "output_not_plain_tensor")


@rule("worker_protocol_error", status="rejected", flag="protocol_violation", family="forged protocol frames")
def worker_protocol_error(reply: dict) -> Verdict | None:
    """The candidate's worker reports that the conversation broke its protocol."""
    if reply.get("kind") != commands.PROTOCOL:
        return None
    return make_verdict("worker_protocol_error", f"the candidate worker broke the protocol: {_error(reply)}")


@rule("compile_error", status="compile_error", family="(not a hack) the candidate does not build or import")
def compile_error(reply: dict) -> Verdict | None:
    """The candidate's source, build or ModelNew did not compile or import."""
    return _failure(reply, commands.COMPILE_ERROR, "compile_error", with_log=True)


@rule("problem_code_failed", status="runtime_error",
      family="(not a hack) the problem's own code fails in the candidate's worker only")
def problem_code_failed(reply: dict) -> Verdict | None:
    """The problem's own code failed in the candidate's worker (and, as the reference's load shows, only there)."""
    return _failure(reply, commands.PROBLEM_ERROR, "problem_code_failed", with_log=True)


@rule("candidate_raised", status="runtime_error", family="exceptions, sys.exit, KeyboardInterrupt in the candidate",
      example="hacks/exit_sys_in_forward.py")
def candidate_raised(reply: dict) -> Verdict | None:
    """The candidate's code raised (any other failure kind)."""
    error = _error(reply)
    if reply.get("fatal"):
        error += "\n(CUDA error: the worker is retired)"
    return make_verdict("candidate_raised", error, log=_log(reply))


# A failure reply's kind -> the rule that judges it (any other kind: candidate_raised).
FAILURE_RULES: dict[str, str] = {
    commands.BAD_OUTPUT: "output_not_plain_tensor", commands.PROTOCOL: "worker_protocol_error",
    commands.COMPILE_ERROR: "compile_error", commands.PROBLEM_ERROR: "problem_code_failed",
}


def worker_failure(reply: dict) -> Verdict:
    """The verdict on a candidate worker's failure reply, by its kind."""
    name = FAILURE_RULES.get(str(reply.get("kind", commands.RUNTIME_ERROR)), "candidate_raised")
    verdict = RULES[name].check(reply)
    return verdict if verdict is not None else candidate_raised(reply)


def _error(reply: dict) -> str:
    return str(reply.get("error", "unknown error"))


def _log(reply: dict) -> str:
    return str(reply.get("log", ""))[-8000:]


def _failure(reply: dict, kind: str, name: str, with_log: bool = False) -> Verdict | None:
    if reply.get("kind") != kind:
        return None
    return make_verdict(name, _error(reply), log=_log(reply) if with_log else "")


# -- the guard's findings -------------------------------------------------------------------

@rule("guard_patched_runtime", status="rejected", flag="patched_runtime",
      family="patching torch, the clock, the comparison; methods added to Tensor; kernels over the harness's ops",
      example="hacks/patch_perf_counter.py")
def guard_patched_runtime(violations: list) -> Verdict | None:
    """The guard found a reassigned function, an added method or a kernel registered over a harness operator."""
    return _guard(violations, "patched_runtime")


@rule("guard_python_threads", status="rejected", flag="python_threads",
      family="background Python threads", example="hacks/thread_persistent_worker.py")
def guard_python_threads(violations: list) -> Verdict | None:
    """The guard found Python threads alive after a call."""
    return _guard(violations, "python_threads")


@rule("guard_child_processes", status="rejected", flag="child_processes",
      family="child processes", example="hacks/child_sleep_at_import.py")
def guard_child_processes(violations: list) -> Verdict | None:
    """The guard found child processes of the worker left running."""
    return _guard(violations, "child_processes")


@rule("guard_unknown_finding", status="rejected", flag="violation", family="a forged report")
def guard_unknown_finding(violations: list) -> Verdict | None:
    """A finding in the candidate's report names a flag the referee does not know."""
    return _guard(violations, "violation")


GUARD_RULES: dict[str, str] = {"patched_runtime": "guard_patched_runtime", "python_threads": "guard_python_threads",
                               "child_processes": "guard_child_processes"}


def guard_findings(violations: list) -> Verdict | None:
    """The verdict on the guard's findings (all of them, named by the first one's rule)."""
    found = [v for v in violations if isinstance(v, dict)] if isinstance(violations, list) else []
    if not violations:
        return None
    first = known_flag(found[0].get("flag")) if found else "violation"
    return RULES[GUARD_RULES.get(first, "guard_unknown_finding")].check(violations)


def _guard(violations: list, first_flag: str) -> Verdict | None:
    if not violations:
        return None
    found = [v for v in violations if isinstance(v, dict)]
    first = known_flag(found[0].get("flag")) if found else "violation"
    if first != first_flag:
        return None
    # The report comes from the candidate's process: a flag name it made up becomes "violation".
    flags = tuple(known_flag(v.get("flag")) for v in found) or ("violation",)
    detail = "; ".join(str(v.get("detail", "")) for v in found)
    name = GUARD_RULES.get(first_flag, "guard_unknown_finding")
    return make_verdict(name, f"the candidate broke a sandbox rule: {detail}", flags=flags)


@rule("malformed_reply", status="rejected", flag="protocol_violation", family="forged protocol frames")
def malformed_reply(reply: object) -> Verdict | None:
    """A reply frame is not a JSON object."""
    return None if isinstance(reply, dict) else make_verdict("malformed_reply", "malformed reply")


@rule("invalid_call_reply", status="rejected", flag="protocol_violation", family="forged protocol frames")
def invalid_call_reply(errors: list) -> Verdict | None:
    """A call's answer does not validate (records.CallReply), or is not for the call the host sent."""
    if not errors:
        return None
    return make_verdict("invalid_call_reply", f"the candidate worker sent a malformed reply: {errors[:1]}")


@rule("missing_in_reply", status="rejected", flag="protocol_violation", family="forged protocol frames")
def missing_in_reply(expected: str) -> Verdict:
    """A reply lacks what the step's protocol requires (the answer to the call sent, one blob per output)."""
    return make_verdict("missing_in_reply", f"the candidate worker broke the protocol (expected {expected})")


@rule("unusable_outputs", status="rejected", flag="protocol_violation", family="forged protocol frames")
def unusable_outputs(error: object) -> Verdict:
    """The outputs a call's answer names cannot be read: not mapped where it says, not laid out contiguously where the host reads them from memory (the worker lays them out in the window), a blob of another size, an unknown dtype, or more than the host has room for."""
    return make_verdict("unusable_outputs", f"candidate outputs unusable: {error}")


@rule("unoffered_build", status="rejected", flag="protocol_violation", family="forged protocol frames")
def unoffered_build(offered: bool) -> Verdict | None:
    """The candidate's worker sent a build request when host builds are off."""
    if offered:
        return None
    return make_verdict("unoffered_build", "the candidate sent a build request it was not offered")

"""The referee's rules in one table: every reason a candidate is rejected, flagged or judged
incorrect (or ends in a timeout, a crash or a compile error).

A rule is a function of records (a call's record, a side's round, a worker's reply, a
comparison) that returns a `Verdict` or None. Each is registered in RULES with its status, its
flag, the hack family it answers and a candidate of tests/adversarial/ that triggers it (or,
where no candidate can reach it, the reason, listed in NO_CORPUS_EXAMPLE). The worker's failure
kinds (`FAILURE_RULES`) and the guard's findings (`GUARD_RULES`) map through the same table. This
module is the only one that makes a verdict: the session calls the rules and `enforce`s what
they return (`VerdictReached` ends the evaluation; a flag-only verdict is noted in `Findings`).

`python -m kernelopt.sandbox.rules` prints the table that docs/referee.md carries.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelopt.sandbox import compare
from kernelopt.sandbox.records import CallRecord, InputSet, RunReply, SideRound
from kernelopt.sandbox.results import FLAGS, TrialResult
from kernelopt.sandbox.timing.allowance import Overheads
from kernelopt.sandbox.worker import commands

FLAGGED = "flagged"  # a verdict that flags the candidate and lets the evaluation go on
# How much more CPU time per second of its turn the candidate's worker may use than the
# reference's (one thread each): the clocks' noise, not a second core.
PARALLEL_CPU_TOLERANCE = 0.10
PARALLEL_CPU_SLACK_S = 0.005


@dataclass(frozen=True)
class Verdict:
    """What a rule decided: a status (or FLAGGED), why, and the flags it sets."""

    rule: str
    status: str
    message: str
    flags: tuple[str, ...] = ()
    log: str = ""


class VerdictReached(Exception):
    """Ends an evaluation early with a rule's verdict (control flow, not an error)."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message)
        self.verdict = verdict
        self.status, self.message, self.flags, self.log = verdict.status, verdict.message, list(verdict.flags), \
            verdict.log


class ProblemCodeFailed(VerdictReached):
    """The problem's own code (its import or get_init_inputs) failed in the candidate's worker,
    before any candidate code ran. The reference's load decides whom to blame: when it fails
    too, the problem is broken (ProblemError); otherwise this is the candidate's verdict."""


@dataclass(frozen=True)
class Rule:
    name: str
    status: str  # what the verdict's status is; "rejected / flagged" where it depends
    flag: str | None
    family: str
    example: str | None  # a candidate path under tests/adversarial/ that triggers it
    check: Callable[..., Verdict | None]
    summary: str


RULES: dict[str, Rule] = {}

# Rules no candidate of tests/adversarial/ can reach deterministically, and why. Each is
# unit-tested on synthetic records (tests/test_rules.py).
NO_CORPUS_EXAMPLE: dict[str, str] = {
    "worker_protocol_error": "the worker reports a protocol error only when the host's frames are out of order; "
                             "a candidate cannot write to the command channel",
    "compile_error": "not a hack: tests/test_adversarial.py's malformed-candidate tests (templates) reach it",
    "problem_code_failed": "needs a problem whose own code fails only in the candidate's worker; "
                           "tests/test_batch.py covers the attribution",
    "build_timeout": "needs an extension build that outlasts the evaluation; tests/test_builds.py (slow)",
    "malformed_reply": "the worker, not the candidate, writes the reply frames",
    "invalid_run_reply": "the worker, not the candidate, writes the reply frames",
    "run_mismatch": "the worker, not the candidate, writes the reply frames",
    "missing_in_reply": "the worker, not the candidate, writes the reply frames",
    "unusable_outputs": "the worker serializes outputs after checking each is a plain tensor (output_not_plain_tensor)",
    "unoffered_build": "a build request is sent by the worker's own build hook, only when host builds are on",
    "guard_unknown_finding": "the guard names only known flags; a made-up flag would need the candidate to write "
                             "the report",
    "init_inputs_changed": "the init inputs are made in the candidate's worker before its module's code can "
                           "reach them; the corpus's attempts end in other rules first",
    "output_count": "defence in depth: the structure string already counts the tensors (output_structure)",
    "inputs_tampered": "the input slot is sealed and hashed by the worker; the corpus's attempts end in "
                       "patched_runtime first",
    "sampled_output_mismatch": "every timed call is fingerprinted first: a wrong timed output fails "
                               "timed_fingerprints before the sampled comparison",
    "wall_clock_gap": "a gross gap must show twice; the corpus's forged timers are charged or rejected "
                      "depending on the host's load (whitebox_shrink_timer_instance expects either)",
    "memory_limit": "the memory hogs end as memory_limit or as a worker death, by which the allocator hits first",
}


def rule(name: str, *, status: str, flag: str | None = None, family: str,
         example: str | None = None) -> Callable[[Callable], Callable]:
    """Register a rule function under `name` (its docstring's first line is the table's summary)."""

    def register(check: Callable) -> Callable:
        summary = (check.__doc__ or "").strip().splitlines()[0] if check.__doc__ else name
        RULES[name] = Rule(name=name, status=status, flag=flag, family=family, example=example, check=check,
                           summary=summary)
        return check

    return register


def _verdict(name: str, message: str, *, status: str | None = None, flags: tuple[str, ...] | None = None,
             log: str = "") -> Verdict:
    entry = RULES[name]
    if flags is None:
        flags = (entry.flag,) if entry.flag else ()
    return Verdict(rule=name, status=status or entry.status, message=message, flags=flags, log=log)


@dataclass
class Findings:
    """The flag-only verdicts of one evaluation, in the order the rules found them."""

    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def flags(self) -> list[str]:
        return list(dict.fromkeys(flag for v in self.verdicts for flag in v.flags))

    @property
    def rules(self) -> list[str]:
        return list(dict.fromkeys(v.rule for v in self.verdicts))


def enforce(verdict: Verdict | None, findings: Findings | None = None) -> None:
    """Act on a rule's answer: nothing, a flag noted in `findings`, or the end of the evaluation."""
    if verdict is None:
        return
    if verdict.status == FLAGGED:
        if findings is None:
            raise ValueError(f"rule {verdict.rule} flags, and there is nowhere to note it")
        findings.verdicts.append(verdict)
        return
    raise (ProblemCodeFailed if verdict.rule == "problem_code_failed" else VerdictReached)(verdict)


def known_flag(name: object) -> str:
    """A flag name from a candidate's process: kept when it is one of ours, else "violation"."""
    return name if isinstance(name, str) and name in FLAGS else "violation"


# -- the worker's failure kinds -------------------------------------------------------------

@rule("output_not_plain_tensor", status="rejected", flag="output_not_plain_tensor",
      family="lazy tensor subclasses, non-tensor outputs", example="hacks/output_python_list.py")
def output_not_plain_tensor(reply: dict) -> Verdict | None:
    """An output is not a plain torch.Tensor (`type(x) is torch.Tensor`, checked in the worker)."""
    return _failure(reply, commands.BAD_OUTPUT, "output_not_plain_tensor")


@rule("active_interception", status="rejected", flag="patched_runtime",
      family="work deferred into the harness's steps (a mode, profile or trace function left active)",
      example="hacks/deferred_work_torch_function_mode.py")
def active_interception(reply: dict) -> Verdict | None:
    """A torch-function or dispatch mode, a profile or trace function is active around the harness's steps."""
    return _failure(reply, commands.INTERCEPTION, "active_interception")


@rule("harness_object_not_plain", status="rejected", flag="harness_object_not_plain",
      family="candidate objects inside the harness's own buffers (inputs list, caches, kept copies)",
      example="hacks/harness_inputs_dispatch_subclass.py")
def harness_object_not_plain(reply: dict) -> Verdict | None:
    """An object the harness copies, hashes, fingerprints or serializes is not the plain one it made."""
    return _failure(reply, commands.HARNESS_OBJECT, "harness_object_not_plain")


@rule("worker_protocol_error", status="rejected", flag="protocol_violation", family="forged protocol frames")
def worker_protocol_error(reply: dict) -> Verdict | None:
    """The candidate's worker reports that the conversation broke its protocol."""
    if reply.get("kind") != commands.PROTOCOL:
        return None
    return _verdict("worker_protocol_error", f"the candidate worker broke the protocol: {_error(reply)}")


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
    return _verdict("candidate_raised", error, log=_log(reply))


# A failure reply's kind -> the rule that judges it (any other kind: candidate_raised).
FAILURE_RULES: dict[str, str] = {
    commands.BAD_OUTPUT: "output_not_plain_tensor", commands.INTERCEPTION: "active_interception",
    commands.PROTOCOL: "worker_protocol_error", commands.COMPILE_ERROR: "compile_error",
    commands.HARNESS_OBJECT: "harness_object_not_plain",
    commands.PROBLEM_ERROR: "problem_code_failed",
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
    return _verdict(name, _error(reply), log=_log(reply) if with_log else "")


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
    return _verdict(name, f"the candidate broke a sandbox rule: {detail}", flags=flags)


# -- the host's view of the workers ---------------------------------------------------------

@rule("worker_timeout", status="timeout", family="hangs", example="hacks/hang_infinite_loop.py")
def worker_timeout(error: str, limit_s: float) -> Verdict:
    """The candidate's worker did not answer before the evaluation's deadline."""
    return _verdict("worker_timeout", f"{error} (limit {limit_s:g} s)")


@rule("build_timeout", status="timeout", family="hangs (in the candidate's extension build)")
def build_timeout(error: str, limit_s: float) -> Verdict:
    """The candidate's extension build failed at the evaluation's deadline."""
    return _verdict("build_timeout", f"{error} (limit {limit_s:g} s)")


@rule("memory_limit", status="rejected", flag="memory_limit", family="memory hogs")
def memory_limit(error: str, exceeded: bool) -> Verdict | None:
    """The worker's process tree went over the memory limit (the host's watchdog killed it)."""
    return _verdict("memory_limit", error) if exceeded else None


@rule("worker_died", status="runtime_error", family="os._exit, segfaults, signals",
      example="hacks/crash_segfault_in_forward.py")
def worker_died(error: str) -> Verdict:
    """The candidate's worker died (exit, signal) before its reply."""
    return _verdict("worker_died", error)


def died_while_loading(error: str) -> ProblemCodeFailed:
    """The candidate's worker died while loading: the problem's own import may have killed it
    (os._exit), so like a problem-code failure it is judged once the reference has loaded
    (worker_died's verdict when the reference loads, the problem's error when it fails too)."""
    return ProblemCodeFailed(worker_died(error))


@rule("malformed_reply", status="rejected", flag="protocol_violation", family="forged protocol frames")
def malformed_reply(reply: object) -> Verdict | None:
    """A reply frame is not a JSON object."""
    return None if isinstance(reply, dict) else _verdict("malformed_reply", "malformed reply")


@rule("invalid_run_reply", status="rejected", flag="protocol_violation", family="forged protocol frames")
def invalid_run_reply(errors: list) -> Verdict | None:
    """A run's report, with its calls' records, does not validate (RunReply)."""
    if not errors:
        return None
    return _verdict("invalid_run_reply", f"the candidate worker sent a malformed reply: {errors[:1]}")


@rule("run_mismatch", status="rejected", flag="protocol_violation", family="forged protocol frames")
def run_mismatch(parsed: RunReply, seeds: list[int]) -> Verdict | None:
    """A run's records are not for the seeds the host sent, or a time is not a finite, non-negative number."""
    if [c.seed for c in parsed.calls] == seeds and all(math.isfinite(c.ms) and c.ms >= 0 for c in parsed.calls):
        return None
    return _verdict("run_mismatch", "the candidate worker's reply does not match the request")


@rule("missing_in_reply", status="rejected", flag="protocol_violation", family="forged protocol frames")
def missing_in_reply(expected: str) -> Verdict:
    """A reply lacks what the step's protocol requires (ready, a call's record, one output blob)."""
    return _verdict("missing_in_reply", f"the candidate worker broke the protocol (expected {expected})")


@rule("unusable_outputs", status="rejected", flag="protocol_violation", family="forged protocol frames")
def unusable_outputs(error: object) -> Verdict:
    """An output blob does not load as tensors."""
    return _verdict("unusable_outputs", f"candidate outputs unusable: {error}")


@rule("unoffered_build", status="rejected", flag="protocol_violation", family="forged protocol frames")
def unoffered_build(offered: bool) -> Verdict | None:
    """The candidate's worker sent a build request when host builds are off."""
    if offered:
        return None
    return _verdict("unoffered_build", "the candidate sent a build request it was not offered")


@rule("init_inputs_changed", status="rejected", flag="inputs_differ",
      family="tampering with get_init_inputs")
def init_inputs_changed(candidate_digest: object, reference_digest: object) -> Verdict | None:
    """The candidate's model was made from init inputs other than the reference's (digests at load)."""
    if candidate_digest == reference_digest:
        return None
    return _verdict("init_inputs_changed", "the candidate changed the problem's init inputs")


@rule("child_processes", status="rejected", flag="child_processes",
      family="child processes (daemonized grandchildren included)", example="hacks/child_daemonized_grandchild.py")
def child_processes(extra: int) -> Verdict | None:
    """The host's census counts live processes in the candidate's sandbox beyond its worker."""
    if extra <= 0:
        return None
    return _verdict("child_processes", f"the candidate left {extra} process(es) running in its sandbox")


@rule("extra_threads", status="rejected on a CPU, flagged on CUDA", flag="native_threads",
      family="background threads, a larger thread pool", example="hacks/threads_set_num_threads.py")
def extra_threads(threads: int, message: Callable[[], str], device: str) -> Verdict | None:
    """The candidate's worker runs more threads than the reference's (the host reads /proc)."""
    if threads <= 0:
        return None
    return _more_threads("extra_threads", message, device)


@rule("parallel_cpu_time", status="rejected on a CPU, flagged on CUDA", flag="native_threads",
      family="work on a second core within the call", example="hacks/thread_parallel_within_call.py")
def parallel_cpu_time(cand: SideRound, ref: SideRound, device: str) -> Verdict | None:
    """The candidate's turn used more CPU time per second of wall time than the reference's (beyond noise).

    Each side of a round runs its calls on one core. A thread that the candidate starts and
    joins within a call leaves nothing for a census to see, but the CPU time it used stays in
    the process's CPU clock."""
    cand_cpu_s, ref_cpu_s = cand.cpu_s, ref.cpu_s
    if cand_cpu_s is None or ref_cpu_s is None or cand.turn_s <= 0 or ref.turn_s <= 0:
        return None
    allowed = cand.turn_s * max(1.0, ref_cpu_s / ref.turn_s) * (1 + PARALLEL_CPU_TOLERANCE) + PARALLEL_CPU_SLACK_S
    if cand_cpu_s <= allowed:
        return None
    return _more_threads("parallel_cpu_time", lambda: (
        f"the candidate's worker used {cand_cpu_s * 1e3:.1f} ms of CPU time in a turn of "
        f"{cand.turn_s * 1e3:.1f} ms: its calls ran work on more than one core at once (threads "
        "started and joined within a call leave no thread behind, but their CPU time counts). "
        "Evaluations run each side on one CPU thread, so that a speedup compares kernels; do the "
        "work in the calling thread"), device)


def _more_threads(name: str, message: Callable[[], str], device: str) -> Verdict:
    """Threads beyond the reference's: flagged, and rejected on a CPU, where each side gets one
    thread (on CUDA the driver starts threads of its own, lazily, and they work beside the calls)."""
    if device.startswith("cuda"):
        return _verdict(name, "more threads than the reference", status=FLAGGED)
    return _verdict(name, message(), status="rejected")


# -- a call's invariants --------------------------------------------------------------------

@rule("output_aliases_input", status="rejected", flag="output_aliases_input", family="input aliasing",
      example="hacks/alias_view_of_input.py")
def output_aliases_input(c: CallRecord) -> Verdict | None:
    """An output shares memory with an input."""
    return _verdict("output_aliases_input", "an output shares memory with an input") if c.aliases_input else None


@rule("output_structure", status="incorrect", family="wrong output structure",
      example="hacks/structure_tuple_for_tensor.py")
def output_structure(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The output's structure (tensor, tuple, list, nesting) differs from the reference's."""
    if c.structure == r.structure:
        return None
    return _verdict("output_structure", f"the output's structure {_words(c.structure)} differs from the "
                                        f"reference's {_words(r.structure)} (T: a tensor, (...): a tuple, [...]: a list)")


@rule("output_count", status="incorrect", family="wrong output structure")
def output_count(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The call returned another number of tensors than the reference's."""
    if len(c.meta) == len(r.meta):
        return None
    return _verdict("output_count", f"returned {len(c.meta)} tensor(s), expected {len(r.meta)}")


@rule("output_shape", status="incorrect", family="shrinking problem sizes", example="hacks/precision_fp16_output.py")
def output_shape(c: CallRecord, r: CallRecord) -> Verdict | None:
    """An output's shape, dtype or device differs from the reference's."""
    for index, (cm, rm) in enumerate(zip(c.meta, r.meta)):
        if tuple(cm) != tuple(rm):
            return _verdict("output_shape", f"output {index}: shape/dtype/device {list(cm)} != expected {list(rm)}")
    return None


def call_invariants(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The first of a call's invariants that fails (aliasing, structure, count, shapes)."""
    return output_aliases_input(c) or output_structure(c, r) or output_count(c, r) or output_shape(c, r)


@rule("inputs_tampered", status="rejected", flag="inputs_differ", family="tampering with the inputs' hand-over")
def inputs_tampered(c: CallRecord, given: InputSet) -> Verdict | None:
    """The inputs the candidate's worker received are not the ones the reference made (digests)."""
    if c.inputs_before == given.digest:
        return None
    return _verdict("inputs_tampered", "the candidate's inputs differ from the ones the reference made: "
                                       "the hand-over of inputs was tampered with")


@rule("input_mutation", status="rejected", flag="input_mutation", family="input mutation",
      example="hacks/mutate_input_inplace.py")
def input_mutation(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The candidate changed its inputs where the reference's forward does not change its own."""
    reference_mutates = r.inputs_after != r.inputs_before
    if c.inputs_after == c.inputs_before or reference_mutates:
        return None
    return _verdict("input_mutation", "the candidate modified its inputs")


# -- correctness ----------------------------------------------------------------------------

@rule("trial_mismatch", status="incorrect", family="wrong or constant outputs (allclose, relative L2)",
      example="hacks/const_softmax_uniform.py")
def trial_mismatch(trials: list[TrialResult]) -> Verdict | None:
    """A correctness trial's outputs differ from the reference's."""
    failed = [t for t in trials if not t.passed]
    return _verdict("trial_mismatch", f"trial {failed[0].index}: {failed[0].message}") if failed else None


@rule("output_ignores_input", status="incorrect", flag="output_ignores_input",
      family="degenerate problems answered by a constant or a subsample", example="hacks/const_mse_loss.py")
def output_ignores_input(finding: str | None) -> Verdict | None:
    """Over the trials, the candidate's error is large against how much the reference's output moves."""
    return _verdict("output_ignores_input", finding) if finding else None


@rule("reduced_precision", status="flagged; rejected with --precision-policy reject", flag="reduced_precision",
      family="precision downgrade", example="hacks/precision_bf16_matmul_reject.py")
def reduced_precision(reduced: bool, policy: str) -> Verdict | None:
    """The error level shows arithmetic below the reference's precision."""
    if not reduced:
        return None
    if policy == "reject":
        return _verdict("reduced_precision", "the error level shows arithmetic below the reference's precision "
                                             "(precision policy: reject)", status="rejected")
    return _verdict("reduced_precision", "reduced precision", status=FLAGGED)


# -- timing ---------------------------------------------------------------------------------

@rule("timed_fingerprints", status="incorrect", flag="inconsistent_outputs",
      family="behaving differently after N calls or when timed; deferred work", example="hacks/calls_correct_then_zeros.py")
def timed_fingerprints(c: CallRecord, r: CallRecord, options) -> Verdict | None:
    """A timed call's output fingerprints differ from the reference's on the same inputs."""
    mismatch = compare.compare_fingerprints(c.fingerprints, r.fingerprints, [list(m) for m in r.meta], options)
    if not mismatch:
        return None
    return _verdict("timed_fingerprints", f"a timed call's output does not match the reference ({mismatch}): "
                                          "correct when checked, wrong when timed")


@rule("sampled_output_mismatch", status="incorrect", flag="inconsistent_outputs",
      family="behaving differently when timed")
def sampled_output_mismatch(comparison: compare.Comparison) -> Verdict | None:
    """The timed call compared in full (chosen after the round) differs from the reference's."""
    if comparison.passed:
        return None
    return _verdict("sampled_output_mismatch", f"a timed call's output does not match the reference "
                                               f"({comparison.message}): correct when checked, wrong when timed")


@rule("timed_output_ignores_input", status="incorrect", flag="output_ignores_input",
      family="behaving differently when timed", example="hacks/timed_running_mean_after_checks.py")
def timed_output_ignores_input(finding: str | None) -> Verdict | None:
    """Over the timed calls compared in full, the candidate's error is large against how much the reference's output moves."""
    if not finding:
        return None
    return _verdict("timed_output_ignores_input", f"over the timed calls compared in full (chosen after each round), "
                                                  f"{finding}: computed when checked, guessed when timed")


@rule("wall_clock_gap", status="rejected", flag="timing_inconsistent",
      family="work moved outside the timed region, forged timings")
def wall_clock_gap(overheads: Overheads) -> Verdict | None:
    """The host's clock saw much more time around the candidate's calls than its timer reported (shown twice)."""
    if not overheads.gross:
        return None
    return _verdict("wall_clock_gap", f"the host clock saw {overheads.candidate_ms - overheads.reference_ms:.3f} ms "
                                      "per call more around the candidate's calls than its timer reported (work "
                                      "hidden from the timer, or forged timings)")


# -- labels ---------------------------------------------------------------------------------

@rule("custom_kernel_unused", status=FLAGGED, flag="custom_kernel_unused",
      family="try/except fallback to PyTorch", example="hacks/fallback_extension_built_but_unused.py")
def custom_kernel_unused(label_flags: list[str]) -> Verdict | None:
    """Extensions were built but the calls never went into them (sandbox/kinds.py)."""
    if "custom_kernel_unused" not in label_flags:
        return None
    return _verdict("custom_kernel_unused", "built extensions went unused")


def _words(structure: str) -> str:
    return structure if len(structure) <= 60 else structure[:57] + "..."


# -- the table ------------------------------------------------------------------------------

TABLE_BEGIN, TABLE_END = "<!-- rules:begin (python -m kernelopt.sandbox.rules) -->", "<!-- rules:end -->"


def markdown_table() -> str:
    """The registry as docs/referee.md's table of rules."""
    lines = ["| rule | status | flag | family | example (tests/adversarial/) | what it checks |",
             "| --- | --- | --- | --- | --- | --- |"]
    for entry in RULES.values():
        example = f"`{entry.example}`" if entry.example else f"none: {NO_CORPUS_EXAMPLE.get(entry.name, '?')}"
        lines.append(f"| `{entry.name}` | {entry.status} | {entry.flag or ''} | {entry.family} | {example} | "
                     f"{entry.summary} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())

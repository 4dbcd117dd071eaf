"""Rules on the host's view of the workers: deadlines, deaths, memory, processes, threads and CPU time."""

from __future__ import annotations

from collections.abc import Callable

from kernelopt.sandbox.records import SideRound
from kernelopt.sandbox.rules.registry import FLAGGED, ProblemCodeFailed, Verdict, make_verdict, rule

# How much more CPU time per second of its turn the candidate's worker may use than the
# reference's (one thread each): the clocks' noise, not a second core.
PARALLEL_CPU_TOLERANCE = 0.10
PARALLEL_CPU_SLACK_S = 0.005


# -- the host's view of the workers ---------------------------------------------------------

@rule("worker_timeout", status="timeout", family="hangs", example="hacks/hang_infinite_loop.py")
def worker_timeout(error: str, limit_s: float) -> Verdict:
    """The candidate's worker did not answer before the evaluation's deadline."""
    return make_verdict("worker_timeout", f"{error} (limit {limit_s:g} s)")


@rule("build_timeout", status="timeout", family="hangs (in the candidate's extension build)")
def build_timeout(error: str, limit_s: float) -> Verdict:
    """The candidate's extension build failed at the evaluation's deadline."""
    return make_verdict("build_timeout", f"{error} (limit {limit_s:g} s)")


@rule("memory_limit", status="rejected", flag="memory_limit", family="memory hogs")
def memory_limit(error: str, exceeded: bool) -> Verdict | None:
    """The worker's process tree went over the memory limit (the host's watchdog killed it)."""
    return make_verdict("memory_limit", error) if exceeded else None


@rule("host_memory_taken", status="rejected", flag="memory_limit",
      family="memory hogs (the machine's memory taken from the reference's data)")
def host_memory_taken(candidate_bytes: int, reference_bytes: int, needed: int, available_room: int,
                      budget_room: int) -> Verdict | None:
    """The candidate's memory beyond the reference's left the host no room for the reference's reply.

    Without that excess the reply would have fit; a reply that would not fit anyway, or that
    the host's own budget refused, stays the problem's (does_not_fit)."""
    excess = candidate_bytes - reference_bytes
    if available_room >= needed or budget_room < needed or excess <= 0 or available_room + excess < needed:
        return None  # the candidate's memory is not why: the problem does not fit this machine
    gib = 2**30
    return make_verdict("host_memory_taken", (
        f"the candidate's worker held {candidate_bytes / gib:.2f} GiB, {excess / gib:.2f} GiB more than the "
        f"reference's, and the machine no longer had room for the reference's reply of {needed / gib:.2f} GiB "
        f"({max(available_room, 0) / gib:.2f} GiB available beyond the reserve): the candidate's memory took "
        "the evaluation's room"))


@rule("worker_died", status="runtime_error", family="os._exit, segfaults, signals",
      example="hacks/crash_segfault_in_forward.py")
def worker_died(error: str) -> Verdict:
    """The candidate's worker died (exit, signal) before its reply."""
    return make_verdict("worker_died", error)


def died_while_loading(error: str) -> ProblemCodeFailed:
    """The candidate's worker died while loading: the problem's own import may have killed it
    (os._exit), so like a problem-code failure it is judged once the reference has loaded
    (worker_died's verdict when the reference loads, the problem's error when it fails too)."""
    return ProblemCodeFailed(worker_died(error))


@rule("init_inputs_changed", status="rejected", flag="inputs_differ",
      family="tampering with get_init_inputs")
def init_inputs_changed(candidate_digest: object, reference_digest: object) -> Verdict | None:
    """The candidate's model was made from init inputs other than the reference's (digests at load)."""
    if candidate_digest == reference_digest:
        return None
    return make_verdict("init_inputs_changed", "the candidate changed the problem's init inputs")


@rule("child_processes", status="rejected", flag="child_processes",
      family="child processes (daemonized grandchildren included)", example="hacks/child_daemonized_grandchild.py")
def child_processes(extra: int) -> Verdict | None:
    """The host's census counts live processes in the candidate's sandbox beyond its worker."""
    if extra <= 0:
        return None
    return make_verdict("child_processes", f"the candidate left {extra} process(es) running in its sandbox")


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


@rule("uncontained", status=FLAGGED, flag="uncontained",
      family="helper processes the host cannot see (an exited leader thread, a double fork) where no "
             "kernel-enforced group holds the worker")
def uncontained(containment: str, detail: str, escape: str = "") -> Verdict | None:
    """No kernel-enforced group held the candidate's processes (the host walked its process tree, which a detached process escapes), or the backend let the worker leave its group."""
    if escape:
        return make_verdict("uncontained", f"the candidate's worker could leave its kernel group ({escape}): a "
                            "process it moves out escapes the census, the freeze, the CPU time and the memory "
                            "watchdog; use the bubblewrap, unshare or docker backend (docs/referee.md, 'Containment')")
    if containment != "none":
        return None
    return make_verdict("uncontained", "no kernel-enforced group held the candidate's processes (containment "
                        f"{detail}): a process whose leader thread exited, or one reparented out of the worker's "
                        "tree, escapes the census, the freeze, the CPU time and the memory watchdog; run as root, "
                        "or delegate a cgroup v2 subtree to this user (docs/referee.md, 'Containment')")


def _more_threads(name: str, message: Callable[[], str], device: str) -> Verdict:
    """Threads beyond the reference's: flagged, and rejected on a CPU, where each side gets one
    thread (on CUDA the driver starts threads of its own, lazily, and they work beside the calls)."""
    if device.startswith("cuda"):
        return make_verdict(name, "more threads than the reference", status=FLAGGED)
    return make_verdict(name, message(), status="rejected")

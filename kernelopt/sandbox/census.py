"""The host's view of the candidate's sandbox, which code inside it cannot falsify: its live
processes and threads (read from /proc by the host) and its CPU clock over a turn."""

from __future__ import annotations

import collections

from kernelopt.sandbox import rules
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.records import SideRound


def processes(conversation: Conversation) -> None:
    """Processes left in the candidate's sandbox (after each call, its group frozen)."""
    rules.enforce(rules.child_processes(conversation.candidate.extra_processes()))


def check(conversation: Conversation, device: str, findings: rules.Findings) -> None:
    """Processes left in the candidate's sandbox, and threads beyond the reference worker's.
    Threads are counted after load and at the ends of the phases (after the labels exchange),
    not right after a call: the host freezes the group as soon as a call answers, when a thread
    the call joined may not have left the kernel yet (an honest executor-style candidate was
    counted so). A thread left running gains nothing between calls: it is frozen there, and
    whatever it does in a window is on the group's CPU clock."""
    processes(conversation)
    threads = conversation.candidate.thread_growth() - conversation.reference.thread_growth()
    rules.enforce(rules.extra_threads(threads, lambda: thread_message(conversation, threads), device), findings)


def parallelism(cand: SideRound, ref: SideRound, device: str, findings: rules.Findings) -> None:
    rules.enforce(rules.parallel_cpu_time(cand, ref, device), findings)


def thread_message(conversation: Conversation, threads: int) -> str:
    """Why extra threads are refused, in terms of what the candidate did. Each side gets one
    CPU thread (OMP_NUM_THREADS=1 for both workers), so that a speedup compares kernels, not
    how many cores each side took from a shared machine (docs/referee.md)."""
    extra = collections.Counter(conversation.candidate.thread_names()) - collections.Counter(
        conversation.reference.thread_names())
    names = ", ".join(sorted(extra)) or "unnamed"
    pool = conversation.labels.get("torch_threads")
    if isinstance(pool, int) and pool > 1:
        return (f"the candidate raised torch's CPU thread pool to {pool} threads (torch.set_num_threads), "
                f"leaving {threads} more thread(s) than the reference's: evaluations run each side on one "
                "CPU thread; remove the call, or set it to 1")
    return (f"the candidate left {threads} more thread(s) running than the reference worker after its calls "
            f"returned (thread names: {names}): evaluations run each side on one CPU thread, and work on other "
            "threads would escape the timing; do the work in the calling thread and stop any thread it starts")

"""Whose turn it is inside the worker: the harness's own steps, where none of the program's code
may run (signals blocked, the collector off, no torch-function or dispatch mode), and the
program's code, which runs as in any process; and the one core a timed call is pinned to.
Standard library and torch only (the worker's package; see main.py)."""

from __future__ import annotations

import _signal
import contextlib
import gc
import os
import signal
import sys

# Bound at import, before any program code runs (like the clock): a program that rebinds the
# module functions later does not reach the harness's turns.
_getprofile, _gettrace = sys.getprofile, sys.gettrace
_gc_enable, _gc_disable = gc.enable, gc.disable
# The C function: signal.pthread_sigmask turns the old mask it returns into a set of enum members,
# which cost a tiny call's window more than the two system calls (py-spy: 9 % of the worker's time).
_signal_mask = _signal.pthread_sigmask
_BLOCKABLE_SIGNALS = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
_PROGRAM_SIGNAL_MASK = _signal_mask(signal.SIG_BLOCK, ())  # the mask the worker started with


@contextlib.contextmanager
def harness_only():
    """The harness's own tensor work: no torch-function or dispatch mode, no subclass handler
    runs in it (defence in depth: what it touches is checked to be plain first)."""
    import torch

    with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
        yield


def harness_turn() -> None:
    """From here until the program's code is called again, none of it can run: signals are
    blocked (a handler the program installed waits; a handler that was already due runs
    now, still inside the host's bracket of the call) and the garbage collector is off (its
    callbacks and the finalizers of collected objects are the program's code). Otherwise a
    program could do the work of its timed calls in the harness's untimed steps after them:
    a timer's handler or a collector callback that fires while the worker waits or reports."""
    _signal_mask(signal.SIG_BLOCK, _BLOCKABLE_SIGNALS)
    _gc_disable()


@contextlib.contextmanager
def program_code():
    """The program's own code (its import, construction, forward, profile) runs as in any
    process: the collector on and the signal mask the worker started with. The harness's turn
    resumes when it returns."""
    _gc_enable()
    _signal_mask(signal.SIG_SETMASK, _PROGRAM_SIGNAL_MASK)
    try:
        yield
    finally:
        harness_turn()


def interceptors() -> list[str]:
    """What is set up to run code inside the harness's steps: torch-function and dispatch
    modes on their stacks, and Python profile/trace functions."""
    import torch

    found = []
    if torch._C._len_torch_function_stack():
        found.append("a torch-function mode")
    if torch._C._len_torch_dispatch_stack():
        found.append("a torch dispatch mode")
    if _getprofile() is not None:
        found.append("a profile function")
    if _gettrace() is not None:
        found.append("a trace function")
    return found


# The affinity this thread had before a call pinned it (None: not pinned now).
_unpinned_affinity: list[set[int] | None] = [None]


@contextlib.contextmanager
def pinned_to(cpu: int | None):
    """Run this thread on one CPU core for the block (the host picks the same core for both
    workers' timed calls). The affinity is not widened again as the block ends, inside the
    call's window, but by `unpin` before the next step that is not pinned: widening it cost
    about 0.2 ms a call on the 2-core VM (py-spy: 41 % of a tiny call's worker time, in that
    one system call), narrowing it microseconds. A core this worker may not use is ignored."""
    if cpu is None:
        unpin()
        yield
        return
    before = _unpinned_affinity[0] or os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        unpin()
        yield
        return
    _unpinned_affinity[0] = before
    yield


def unpin() -> None:
    """Give this thread back the affinity it had before the calls pinned it."""
    before, _unpinned_affinity[0] = _unpinned_affinity[0], None
    if before is not None:
        os.sched_setaffinity(0, before)

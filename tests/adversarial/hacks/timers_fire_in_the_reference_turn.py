# problem: 4_RedundantSoftmax
# expect-status: correct
# speedup-max: 1.5
# family: slowing the reference's turn (work the kernel does for a frozen candidate)
# why: an exact copy that makes the reference pay for interrupts. At load it makes 1500 timerfds
#   and 1000 epoll instances that each watch all of them, so one timer's expiry runs 1000 wake-up
#   callbacks in interrupt context (about 0.3 ms). It tells the turns apart (a turn's untimed first
#   call repeats the set of the call before it) and, in the first call of each round it opens,
#   arms one-shot timers spaced 450 us apart to expire after its own turn, through the reference's
#   turns on the same core; it disarms those that would still hit its own calls. Frozen groups run
#   nothing, but their timers expire, and without the kernel's IRQ time accounting their work is
#   charged to the task that is running: the reference's CPU time grew about twofold, and this
#   read correct at 1.87x-1.96x, unflagged, with exact copies at 1.02x-1.03x (the 2-core VM,
#   2026-11-29; 1.85x-1.97x on KernelBench's 88_MinGPTNewGelu). Now the candidate's worker
#   refuses every call that creates a timer (worker/syscall_filter.py): the storm cannot be built
#   and the copy reads as a copy
import ctypes
import os
import resource
import select
import sys
import time

import torch
import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]  # the problem file, loaded in this process first
_REFERENCE = _problem.Model(*_problem.get_init_inputs())

TIMERS, EPOLLS = 1500, 1000
SPACING_NS = 450_000
_libc = ctypes.CDLL(None, use_errno=True)


class _TimeSpec(ctypes.Structure):
    _fields_ = [("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long)]


class _Expiry(ctypes.Structure):
    _fields_ = [("interval", _TimeSpec), ("value", _TimeSpec)]


class _Storm:
    """One-shot timers on the monotonic clock, each watched by every epoll instance."""

    def __init__(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = TIMERS + EPOLLS + 200
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(hard, want), hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.armed: list[tuple[int, int]] = []
        self.next = 0
        self.epolls = []
        self.timers = [_libc.timerfd_create(1, os.O_NONBLOCK | os.O_CLOEXEC) for _ in range(TIMERS)]
        if min(self.timers) < 0:  # refused: no storm, an honest copy
            self.timers = []
            return
        for _ in range(max(0, min(EPOLLS, soft - TIMERS - 100))):
            epoll = select.epoll()
            for fd in self.timers:
                epoll.register(fd, select.EPOLLIN)
            self.epolls.append(epoll)

    def _set(self, fd: int, at_ns: int) -> None:
        expiry = _Expiry()
        expiry.value.seconds, expiry.value.nanoseconds = divmod(at_ns, 1_000_000_000)
        _libc.timerfd_settime(fd, 1 if at_ns else 0, ctypes.byref(expiry), None)  # 1: absolute time

    def arm(self, start_ns: int, span_ns: int) -> None:
        count = min(len(self.timers), max(0, span_ns // SPACING_NS))
        self.armed = [(start_ns + i * SPACING_NS, self.timers[i]) for i in range(count)]
        self.next = 0
        for at, fd in self.armed:
            self._set(fd, at)

    def disarm_before(self, until_ns: int) -> None:
        """Those that would expire in our own calls."""
        while self.next < len(self.armed) and self.armed[self.next][0] < until_ns:
            self._set(self.armed[self.next][1], 0)
            self.next += 1

    def disarm_all(self) -> None:
        for _, fd in self.armed[self.next:]:
            self._set(fd, 0)
        self.armed = []


class _Turns:
    """Where the turns begin (the untimed first call repeats the last set), how long ours last,
    and when to arm: in the first call of every second turn, the rounds this side opens."""

    def __init__(self):
        self.storm = _Storm()
        self.last = None
        self.openers = 0
        self.calls = 0
        self.calls_per_turn = None
        self.turn_start = self.last_end = self.armed_at = None
        self.rest = self.cycle = self.gap = None
        self.steps: list[int] = []
        self.last_start = None

    def before(self, x: torch.Tensor) -> None:
        now = time.monotonic_ns()
        sample = x.reshape(-1)[:32].clone()
        opener = self.last is not None and torch.equal(sample, self.last)
        self.sample = sample
        if opener:
            self._turn_begins(now)
        elif self.storm.armed and self.armed_at is not None and self.calls_per_turn and self.steps:
            recent = sorted(self.steps[-10:])
            left = self.calls_per_turn - self.calls
            self.storm.disarm_before(now + (left - 1) * recent[len(recent) // 2] + int(1.2 * recent[-1]) + 1_000_000)
        if not opener and self.last_start is not None and self.openers and self.calls:
            self.steps.append(now - self.last_start)
        self.calls += 1
        self.last_start = now

    def _turn_begins(self, now: int) -> None:
        if self.storm.armed:
            self.storm.disarm_all()
        if self.turn_start is not None and self.calls > 1:
            self.rest = self.last_end - self.turn_start
        self.openers += 1
        if self.openers % 2 == 0:
            self.gap = now - self.last_end
        elif self.armed_at is not None:
            self.cycle = now - self.armed_at
        if self.openers == 2:
            self.calls_per_turn = self.calls
        self.calls, self.turn_start, self.armed_at = 0, now, None
        if self.openers >= 2 and self.openers % 2 == 0 and self.rest is not None and self.storm.timers:
            span = int(1.5 * self.cycle) if self.cycle else int(2 * (2 * self.rest + (self.gap or 0)))
            self.storm.arm(now + int(1.35 * self.rest) + 1_000_000, span)
            self.armed_at = now

    def after(self) -> None:
        self.last = self.sample
        self.last_end = time.monotonic_ns()


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.turns = _Turns()

    def forward(self, x):
        self.turns.before(x)
        out = _REFERENCE(x)  # an exact copy: the problem's own forward
        self.turns.after()
        return out

"""The candidate's worker may not arm anything the kernel runs by itself while the worker is frozen.

A frozen group runs nothing of its own, but timers it armed before the freeze still expire, on
the CPU they were armed on: the timed calls' core, where the other side's window runs next. An
expiry's work is done in interrupt context and, without the kernel's IRQ time accounting (off in
most distributions' kernels), charged to whichever task is running there: the reference. A
timerfd watched by a thousand epoll instances runs a thousand wake-up callbacks per expiry, about
0.3 ms on the 2-core VM; armed to expire through the reference's turns, such timers read an exact
copy of KernelBench's 88_MinGPTNewGelu at 1.85x-1.97x, correct and unflagged (2026-11-29,
`tests/adversarial/hacks/timers_fire_in_the_reference_turn.py`). Everything else that wakes a
frozen group's kernel objects without it running (signals from a timer, io_uring's timeouts)
also starts from a timer: so the worker, before any program code runs, installs a seccomp filter
on every thread of its process (and, inherited, of everything it starts) that answers the calls
creating one with EPERM: timerfd_create, timer_create, setitimer, alarm and io_uring_setup.
Sleeping with a timeout (time.sleep, poll, futex waits) stays allowed: a frozen thread's sleep is
interrupted by the freeze and wakes nothing but that thread.

Unknown architectures get no filter (`install` says so, and the verdict carries it); a 32-bit or
x32 system call from the 64-bit worker, which a program could make to slip past the numbers
below, is refused whole.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# Per architecture: the seccomp audit value and the numbers of the calls refused.
_ARCHITECTURES = {
    "x86_64": (0xC000003E, {"timerfd_create": 283, "timer_create": 222, "setitimer": 38, "alarm": 37,
                            "io_uring_setup": 425}),
    "aarch64": (0xC00000B7, {"timerfd_create": 85, "timer_create": 107, "setitimer": 103,
                             "io_uring_setup": 425}),
}
DENIED = ("timerfd_create", "timer_create", "setitimer", "alarm", "io_uring_setup")

_X32_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers
_SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1  # every thread of the process, not only the caller
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

# Classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_IF_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def program(machine: str) -> bytes | None:
    """The filter for `machine` (platform.machine()) as packed sock_filter instructions, or None
    where its system call numbers are not known here."""
    if machine not in _ARCHITECTURES:
        return None
    audit_arch, numbers = _ARCHITECTURES[machine]
    refuse = _RET_ERRNO | errno.EPERM
    steps = [(_LOAD_WORD, 0, 0, 4),  # arch
             (_JUMP_IF_EQUAL, 1, 0, audit_arch),
             (_RETURN, 0, 0, refuse),  # another ABI's calls (int 0x80 on x86_64): none of ours
             (_LOAD_WORD, 0, 0, 0)]  # the call's number
    if machine == "x86_64":
        steps += [(_JUMP_IF_AT_LEAST, 0, 1, _X32_BIT), (_RETURN, 0, 0, refuse)]
    denied = sorted(numbers.values())
    for position, number in enumerate(denied):
        # Equal: jump over the remaining tests and the allow to the refusal at the end.
        steps.append((_JUMP_IF_EQUAL, len(denied) - position, 0, number))
    steps += [(_RETURN, 0, 0, _RET_ALLOW), (_RETURN, 0, 0, refuse)]
    return b"".join(struct.pack("=HBBI", *step) for step in steps)


def install() -> str:
    """Install the filter on this process's threads: "" once it holds, else why it does not."""
    machine = platform.machine()
    code = program(machine)
    if code is None:
        return f"no system call table for {machine} here"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _Program(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(_SECCOMP_SYSCALL[machine]), ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                          ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if result != 0:
        why = f"thread {result} could not take it" if result > 0 else errno.errorcode.get(ctypes.get_errno(), "?")
        return f"seccomp(SET_MODE_FILTER) failed: {why}"
    return ""

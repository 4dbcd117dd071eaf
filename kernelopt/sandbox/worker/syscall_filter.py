"""The candidate's worker may not make anything the kernel wakes by itself while the worker is frozen.

A frozen group runs nothing of its own, but the kernel still acts on its objects: a timer it armed
expires, a loopback TCP flow it paced releases its next segment. That work runs in interrupt or
softirq context on the CPU the object lives on, the timed calls' core, where the other side's
window runs next; without the kernel's IRQ time accounting (off in most distributions' kernels)
it is charged to whichever task is running there: the reference. Alone each event is small; the
amplifier is epoll, whose every registration on the woken object runs a callback, so a program
that registers the object a thousand or ten thousand times over makes each event cost a
millisecond of the reference's time. Two red-team candidates did exactly this to exact copies and
read correct at 1.8x-2.0x (one-shot timerfds armed through the reference's turns:
`tests/adversarial/hacks/timers_fire_in_the_reference_turn.py`) and 1.6x (a loopback TCP flow
paced by the kernel, released segment by segment while frozen:
`tests/adversarial/hacks/loopback_pacing_fires_in_the_reference_turn.py`), 2026-11-29.

Nothing the candidate needs wakes by itself, so the worker, before any program code runs,
installs a seccomp filter on every thread of its process (and, inherited, of everything it
starts) that refuses with EPERM every call that makes such a source: timers (timerfd_create,
timer_create, setitimer, alarm), sockets of any family but AF_UNIX (TCP and UDP with their kernel
timers, netlink's kernel events, packet sockets), and asynchronous I/O whose completion arrives
later (io_setup, io_uring_setup). What stays allowed wakes only a thread that is waiting, and the
freeze interrupts every wait: sleeping with a timeout, pipes and AF_UNIX sockets, whose other
ends are the host's (silent while the reference runs) or the group's own (frozen).

Unknown architectures get no filter (`install` says so, and the verdict carries it); a 32-bit or
x32 system call from the 64-bit worker, which a program could make to slip past the numbers
below, is refused whole.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import struct

# Per architecture: the seccomp audit value, the numbers of the calls refused, and socket's.
_ARCHITECTURES = {
    "x86_64": (0xC000003E, {"timerfd_create": 283, "timer_create": 222, "setitimer": 38, "alarm": 37,
                            "io_setup": 206, "io_uring_setup": 425}, 41),
    "aarch64": (0xC00000B7, {"timerfd_create": 85, "timer_create": 107, "setitimer": 103, "io_setup": 0,
                             "io_uring_setup": 425}, 198),
}

_X32_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers
_SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1  # every thread of the process, not only the caller
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

# Classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]} (little-endian:
# the low word of args[0] at byte 16).
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_IF_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ARCH, _NUMBER, _FIRST_ARGUMENT = 4, 0, 16


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _assemble(steps: list) -> bytes:
    """sock_filter instructions from (code, if_true, if_false, k) steps whose jump targets may be
    label names, and label names alone marking where they lead."""
    labels, position = {}, 0
    for step in steps:
        if isinstance(step, str):
            labels[step] = position
        else:
            position += 1
    code, position = [], 0
    for step in steps:
        if isinstance(step, str):
            continue
        op, if_true, if_false, k = step
        jumps = [labels[target] - position - 1 if isinstance(target, str) else target for target in (if_true, if_false)]
        code.append(struct.pack("=HBBI", op, jumps[0], jumps[1], k))
        position += 1
    return b"".join(code)


def program(machine: str) -> bytes | None:
    """The filter for `machine` (platform.machine()) as packed sock_filter instructions, or None
    where its system call numbers are not known here."""
    if machine not in _ARCHITECTURES:
        return None
    audit_arch, numbers, socket_number = _ARCHITECTURES[machine]
    steps: list = [(_LOAD_WORD, 0, 0, _ARCH),
                   (_JUMP_IF_EQUAL, 0, "refuse", audit_arch),  # another ABI's calls (int 0x80): none of ours
                   (_LOAD_WORD, 0, 0, _NUMBER)]
    if machine == "x86_64":
        steps.append((_JUMP_IF_AT_LEAST, "refuse", 0, _X32_BIT))
    steps += [(_JUMP_IF_EQUAL, "refuse", 0, number) for number in sorted(numbers.values())]
    steps += [(_JUMP_IF_EQUAL, 0, "allow", socket_number),
              (_LOAD_WORD, 0, 0, _FIRST_ARGUMENT),  # socket's family
              (_JUMP_IF_EQUAL, "allow", "refuse", socket.AF_UNIX),
              "allow", (_RETURN, 0, 0, _RET_ALLOW),
              "refuse", (_RETURN, 0, 0, _RET_ERRNO | errno.EPERM)]
    return _assemble(steps)


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

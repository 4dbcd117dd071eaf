"""The candidate's worker can make nothing the kernel wakes by itself (worker/syscall_filter.py):
timers it left armed, or a loopback TCP flow the kernel paces, would fire while it is frozen, on
the core where the reference's turn runs next, and their interrupt work is charged to the
reference (tests/adversarial/hacks/timers_fire_in_the_reference_turn.py,
loopback_pacing_fires_in_the_reference_turn.py)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, evaluate
from kernelopt.sandbox.worker import syscall_filter

REPO = Path(__file__).resolve().parents[1]
SANDBOX = REPO / "kernelopt" / "sandbox"

PROBE = textwrap.dedent("""
    import ctypes, json, platform, select, signal, socket, subprocess, sys, threading, time
    from worker import syscall_filter

    IO_SETUP = {"x86_64": 206, "aarch64": 0}.get(platform.machine(), -1)

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def refused(result):
        return result == -1 and ctypes.get_errno() == 1  # EPERM

    seen = {}
    go, done = threading.Event(), threading.Event()

    def older_thread():  # started before the filter: it must hold here too
        go.wait()
        seen["timerfd in a thread started before"] = refused(libc.timerfd_create(1, 0))
        done.set()

    threading.Thread(target=older_thread).start()
    seen["timerfd before the filter"] = libc.timerfd_create(1, 0) >= 0
    seen["install"] = syscall_filter.install()
    go.set(); done.wait()
    seen["timerfd_create"] = refused(libc.timerfd_create(1, 0))
    seen["timer_create"] = refused(libc.timer_create(1, None, ctypes.byref(ctypes.c_void_p())))
    seen["io_uring_setup"] = refused(libc.syscall(ctypes.c_long(425), ctypes.c_long(4), ctypes.c_void_p(0)))
    seen["io_setup"] = refused(libc.syscall(ctypes.c_long(IO_SETUP), ctypes.c_long(1), ctypes.byref(ctypes.c_ulong())))
    for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):
        try:
            socket.socket(family, socket.SOCK_DGRAM if family != socket.AF_NETLINK else socket.SOCK_RAW).close()
            seen[f"socket {family.name}"] = False
        except PermissionError:
            seen[f"socket {family.name}"] = True
    ours, theirs = socket.socketpair()  # AF_UNIX: the worker's own channels
    ours.send(b"x")
    seen["AF_UNIX still works"] = theirs.recv(1) == b"x" and socket.socket(socket.AF_UNIX).fileno() > 0
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        seen["setitimer"] = False
    except OSError:
        seen["setitimer"] = True
    child = subprocess.run([sys.executable, "-c", "import signal; signal.setitimer(signal.ITIMER_REAL, 5.0)"],
                           capture_output=True)
    seen["setitimer in a child"] = child.returncode != 0
    time.sleep(0.001)
    select.epoll().poll(0.001)
    import torch
    seen["ordinary work"] = float(torch.relu(torch.tensor([-1.0, 2.0])).sum()) == 2.0
    print(json.dumps(seen))
""")


@pytest.mark.skipif(syscall_filter.program(platform.machine()) is None, reason="no system call table for this machine")
def test_the_filter_refuses_timers_sockets_and_async_io_on_every_thread_and_child():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=SANDBOX, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen.pop("install") == ""
    assert all(seen.values()), seen


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_each_known_machine_gets_a_filter_of_whole_instructions(machine):
    code = syscall_filter.program(machine)
    assert code is not None and len(code) % 8 == 0  # struct sock_filter: 8 bytes each
    assert syscall_filter.program("riscv64") is None  # unknown numbers: no filter, and the verdict says so


SETS_A_TIMER = """
import signal
import torch
import torch.nn as nn

try:
    signal.setitimer(signal.ITIMER_REAL, 30.0)
    ARMED = True
except OSError:
    ARMED = False


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) + (1.0 if ARMED else 0.0)
"""


def test_a_candidate_is_refused_timers_and_its_verdict_says_so():
    """The filter is the candidate's only (the reference is trusted code): its setitimer fails,
    so it computes the exact ReLU, and the verdict records that wake-up sources were denied."""
    problem = load_problem(REPO / "examples" / "level1" / "1_ReLU.py")
    result = evaluate(problem, SETS_A_TIMER, EvalOptions(timing_budget=0.5, correctness_trials=2))
    assert result.status == "correct", result.message
    assert result.isolation is not None and result.isolation.wakeup_sources_denied
    assert not any("timers" in w for w in result.isolation.warnings)

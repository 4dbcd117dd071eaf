# problem: 4_RedundantSoftmax
# expect-status: correct
# speedup-max: 1.5
# family: slowing the reference's turn (work the kernel does for a frozen candidate)
# why: an exact copy that makes the reference pay for its own freezes. It finds the reference
#   worker's kernel group under /sys/fs/cgroup (the sibling of its own), opens that group's
#   cgroup.events and registers it 400,000 times over a thousand epoll instances (dup2, register,
#   close: the items stay). When the host freezes the reference after each call, the last of its
#   tasks to stop notifies the file's watchers in its own context, and that walk over every
#   registration is charged to the reference's CPU time. Needs no timer, socket or running code
#   of its own: correct at 7.35x-7.91x here (the reference's 7 ms call read 54-59 ms) and 1.75x-3.60x
#   on KernelBench's 88_MinGPTNewGelu (100,000-400,000 registrations), unflagged, exact copies at
#   1.00x-1.04x (the 2-core VM, 2026-11-29, bubblewrap as root, timers and sockets already
#   refused); 0.99x and 1.04x after. Now, as root, the sandbox mounts an empty /sys/fs/cgroup
#   and keeps no capabilities (isolation.py); unprivileged, the host's groups are not the
#   sandbox user's to watch; a container has its own cgroup namespace
import glob
import os
import resource
import select
import sys

import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]  # the problem file, loaded in this process first
_REFERENCE = _problem.Model(*_problem.get_init_inputs())
EPOLLS, NUMBERS = 1000, 400


def _the_reference_groups() -> list[str]:
    """Sibling groups of this worker's own (the host names them after itself)."""
    me, own, others = str(os.getpid()), None, []
    for group in sorted(glob.glob("/sys/fs/cgroup/unified/kernelopt-*") + glob.glob("/sys/fs/cgroup/kernelopt-*")):
        try:
            with open(group + "/cgroup.procs") as procs:
                members = procs.read().split()
        except OSError:
            continue
        if me in members:
            own = group
        else:
            others.append(group)
    if own is None:
        return []
    prefix = own.rsplit("-", 1)[0] + "-"
    return [group for group in others if group.startswith(prefix)]


def _watch(groups: list[str]):
    """Every group's cgroup.events registered NUMBERS times in each of EPOLLS epoll instances."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    files, epolls = [], [select.epoll() for _ in range(EPOLLS)]
    for group in groups:
        events = open(group + "/cgroup.events", "rb")
        files.append(events)
        for i in range(NUMBERS):
            number = hard - 50 - i
            os.dup2(events.fileno(), number)
            for epoll in epolls:
                epoll.register(number, select.EPOLLPRI)
            os.close(number)
    return files, epolls


try:
    _KEPT = _watch(_the_reference_groups())
except (OSError, ValueError, AttributeError):
    _KEPT = None  # nothing to watch: an honest copy


class ModelNew(nn.Module):
    def forward(self, x):
        return _REFERENCE(x)

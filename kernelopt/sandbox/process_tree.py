"""The degraded fallback of containment.py: a worker's processes found by walking /proc.

Where the kernel offers no group (containment.detect says `none`), the worker's processes are
found by walking /proc's children lists from the process the host started, frozen with SIGSTOP
per process, charged by the CPU clock of the worker process alone, and killed per process and
session. A process whose leader thread exited (it reads as a zombie), or one reparented out of
the tree (a double fork), escapes all of it: verdicts under it are flagged `uncontained`
(rules/host.py).
"""

from __future__ import annotations

import os
import signal
import time


class TreeWalk:
    """A worker's processes as the tree below the process the host started (the same interface
    as containment.Group)."""

    kind = "none"

    def __init__(self, reason: str = ""):
        self._record = reason if reason.startswith("none") else "none" + (f"; {reason}" if reason else "")
        self.root: int | None = None
        self.worker_pid: int | None = None
        self._stopped: list[int] = []

    def record(self) -> str:
        return self._record

    def launcher(self) -> list[str]:
        return []

    def attach(self, pid: int) -> None:
        self.root = pid

    def _tree(self) -> list[int]:
        return [] if self.root is None else [self.root, *descendants(self.root)]

    def members(self) -> list[int]:
        return [pid for pid in self._tree() if not is_zombie(pid)]

    def threads(self) -> list[int]:
        found = []
        for pid in self.members():
            try:
                found += [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
            except (OSError, ValueError):
                pass
        return found

    def cpu_seconds(self) -> float | None:
        """The CPU clock of the worker process (all its threads, those that exited included);
        nothing of its children or of a process that left the tree."""
        if self.worker_pid is None:
            return None
        try:
            return time.clock_gettime(_process_cpu_clock(self.worker_pid))
        except OSError:
            return None

    def memory_bytes(self) -> int:
        return sum(resident_bytes(pid) for pid in self._tree())

    def oom_killed(self) -> bool:
        return False

    def limit_memory(self, limit_bytes: int) -> bool:
        return False

    def freeze(self) -> bool:
        """SIGSTOP (it cannot be caught, blocked or ignored) to every live process of the tree."""
        self._stopped = self.members()
        for pid in self._stopped:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        return True

    def thaw(self, wait: bool = True) -> bool:
        for pid in self._stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._stopped = []
        return True

    def kill(self) -> bool:
        for pid in self._tree():
            try:
                os.killpg(pid, signal.SIGKILL)  # the session the worker (or a child) leads
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return True

    def remove(self) -> None:
        self.kill()


def _process_cpu_clock(pid: int) -> int:
    """The clock id of another process's CPU clock, as Linux's clock_getcpuclockid(3) makes it
    (CPUCLOCK_SCHED for the whole process: (~pid << 3) | 2); Python has no binding for it."""
    return (~pid << 3) | 2


def descendants(root: int) -> list[int]:
    """All processes below `root`. Reads the kernel's per-thread children lists (cheap: cost
    follows the tree, not the machine); scans /proc where those lists are unavailable."""
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        kids = children(pid)
        if kids is None:
            return _descendants_by_scan(root)
        found.extend(kids)
        stack.extend(kids)
    return found


def children(pid: int) -> list[int] | None:
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []  # the process is gone
    except OSError:
        return None
    found: list[int] = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found.extend(int(c) for c in handle.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None  # a kernel without children lists
        except (OSError, ValueError):
            continue
    return found


def _descendants_by_scan(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        ppid = parent_pid(int(entry))
        if ppid is not None:
            parents.setdefault(ppid, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in parents.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def leaf_of_chain(pid: int) -> int:
    """The worker process: the end of the single-child chain bwrap/unshare start."""
    while True:
        kids = children(pid) or []
        if len(kids) != 1:
            return pid
        pid = kids[0]


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses):
    [0] the state, [1] the parent's pid, [19] the start time in clock ticks since boot; None
    where this host has no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields if len(fields) > 19 else None


def parent_pid(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields is not None else None


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot): with its pid, a process's identity that a
    reused pid does not take over. None for a zombie or where there is no such process."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None and fields[0] not in ("Z", "X") else None


def is_zombie(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is None or fields[0] in ("Z", "X")  # (gone counts as dead too)


def resident_bytes(pid: int) -> int:
    """A process's resident memory; a process whose leader thread exited has no memory of its
    own in /proc/<pid>/statm (it reads 0), so its live threads are asked."""
    page = os.sysconf("SC_PAGE_SIZE")
    paths = [f"/proc/{pid}/statm"]
    try:
        paths += [f"/proc/{pid}/task/{tid}/statm" for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        pass
    for path in paths:
        try:
            with open(path, "rb") as handle:
                pages = int(handle.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if pages:
            return pages * page
    return 0


class ContainerWalk(TreeWalk):
    """A docker worker's processes. The container is itself a cgroup, and the daemon acts on all
    of it: `pause`/`unpause` (the cgroup freezer) stop every process of it during the other
    side's turn, `stats` gives its CPU time (every process that ran in it), removing it kills
    all. The census and the memory watchdog walk the tree under the container's init (a local
    daemon's containers are the host kernel's processes); its own limits hold it too."""

    kind = "docker"

    def __init__(self, container):
        super().__init__()
        self._record = ("docker: the container's own cgroup (paused during the other side's turn, its CPU time "
                        "from the daemon's stats, removed whole)")
        self.container = container

    def cpu_seconds(self) -> float | None:
        try:
            stats = self.container.stats(stream=False, one_shot=True)
            return int(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9
        except Exception:  # noqa: BLE001 - a daemon without one-shot stats: no CPU time
            return None

    def freeze(self) -> bool:
        try:
            self.container.pause()
            return True
        except Exception:  # noqa: BLE001 - gone, or a daemon that cannot pause: the census still runs
            return False

    def thaw(self, wait: bool = True) -> bool:
        try:
            self.container.unpause()
            return True
        except Exception:  # noqa: BLE001
            return False

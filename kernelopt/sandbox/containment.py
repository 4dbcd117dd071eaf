"""Containment the kernel enforces: one control group per worker.

A worker's processes are found, frozen, charged and killed through a cgroup the worker enters
before it execs its sandbox (the launcher prefix below), so everything it ever starts is a member
however it detaches: a process whose leader thread exited (it reads as a zombie in /proc, and its
children lists are gone), a double fork into a new session (reparented out of the tree), a
process that changed its group or session. The kernel lists every member and every thread,
freezes them all at once, sums the CPU time of all of them (those that exited included) and
kills them all.

Mechanisms, strongest first (`detect`; KERNELOPT_CONTAINMENT=auto|cgroup2|cgroup1|none forces one,
`required` is auto that refuses to judge where there is none):

cgroup2  a writable cgroup v2 hierarchy (pure v2 at /sys/fs/cgroup, or hybrid's
         /sys/fs/cgroup/unified): cgroup.freeze, cgroup.kill, cpu.stat's usage_usec and
         cgroup.procs/cgroup.threads need no controller; memory.current/memory.max where the
         memory controller is enabled for the group.
cgroup1  v1's freezer and cpuacct hierarchies (memory too, where it is mounted and writable):
         freezer.state, cpuacct.usage, tasks; killing is freeze, SIGKILL every task, thaw.
none     neither is writable here (not root, no delegation): the host falls back to walking
         /proc's process tree, which a candidate can escape; verdicts are flagged `uncontained`.

Groups are created under the host process's own cgroup in each hierarchy, named
kernelopt-<host pid>-<n>, and removed by `Group.remove`; no other cgroup is ever written.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt.sandbox import process_tree
from kernelopt.sandbox.isolation import IsolationError
from kernelopt.sandbox.process_tree import resident_bytes

MECHANISMS = ("cgroup2", "cgroup1", "none")
CHOICES = ("auto", "required", *MECHANISMS)  # required: auto, and refuse to judge where it finds none
ENV_VAR = "KERNELOPT_CONTAINMENT"
FREEZE_TIMEOUT_S = 5.0
_V1_CONTROLLERS = ("freezer", "cpuacct", "memory")
_counter = itertools.count()
_live: set[Group] = set()  # groups this process made and has not removed (removed at exit)
_live_lock = threading.Lock()

DESCRIPTIONS = {
    "cgroup2": "a cgroup v2 group per worker (kernel freeze, kill, CPU time and membership over every process "
               "and thread it starts)",
    "cgroup1": "cgroup v1 freezer and cpuacct groups per worker (kernel freeze, CPU time and membership over "
               "every process and thread it starts)",
    "none": "no kernel containment: the host walks the worker's process tree, which a detached process "
            "(exited leader thread, double fork) escapes",
}


class ContainmentError(IsolationError):
    """The requested containment cannot be set up here."""


@dataclass(frozen=True)
class Mechanism:
    """What this machine offers: the mechanism's name, the parent directories the groups go
    under (one per hierarchy: {"unified": ...} for v2, {"freezer": ..., "cpuacct": ...,
    "memory": ...} for v1), whether memory is accounted and limited by the kernel, and why no
    stronger mechanism is used."""

    name: str
    parents: dict[str, Path] = field(default_factory=dict)
    memory: bool = False
    reason: str = ""

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self.name]

    def record(self) -> str:
        """The line for a verdict's isolation record and for doctor."""
        text = self.name + (" (with memory controller)" if self.memory else "")
        return text + (f"; {self.reason}" if self.reason else "")


def detect(choice: str | None = None) -> Mechanism:
    """The strongest mechanism that works here (or the one `choice`/KERNELOPT_CONTAINMENT names;
    a named one that does not work raises ContainmentError). Probes by creating and removing a
    group, never by guessing from paths."""
    choice = (choice or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if choice not in CHOICES:
        raise ContainmentError(f"{ENV_VAR}={choice!r}: choose one of {', '.join(CHOICES)}")
    if choice == "none":
        return Mechanism("none", reason=f"containment turned off ({ENV_VAR}=none)")
    reasons: list[str] = []
    for name, probe in (("cgroup2", _probe_v2), ("cgroup1", _probe_v1)):
        if choice not in ("auto", "required", name):
            continue
        found, why = probe()
        if found is not None:
            failure = _trial(found)
            if failure:
                found, why = None, failure
        if found is not None:
            return Mechanism(found.name, found.parents, found.memory, "; ".join(reasons + ([why] if why else [])))
        reasons.append(f"{name}: {why}")
        if choice == name:
            raise ContainmentError(f"{ENV_VAR}={name} is not usable here: {why}")
    if choice == "required":
        raise ContainmentError(f"{ENV_VAR}=required, and no kernel-enforced group is possible here: "
                               + "; ".join(reasons))
    return Mechanism("none", reason="; ".join(reasons))


@functools.lru_cache(maxsize=None)
def _detect_cached(choice: str) -> Mechanism:
    return detect(choice)


def current() -> Mechanism:
    """The mechanism workers get (detected once per process for each KERNELOPT_CONTAINMENT value)."""
    return _detect_cached((os.environ.get(ENV_VAR) or "auto").strip().lower())


def for_worker(mechanism: Mechanism) -> Group | process_tree.TreeWalk:
    """A new worker's containment: a kernel group, or the tree walk where there is none (or the
    group could not be made; the walk's `record` then says why)."""
    if mechanism.name == "none":
        return process_tree.TreeWalk(mechanism.record())
    try:
        return Group(mechanism)
    except ContainmentError as exc:
        return process_tree.TreeWalk(f"none; {exc}")


def _mounts() -> list[tuple[str, Path, set[str]]]:
    """(fstype, mount point, super options) of every cgroup mount, from /proc/self/mountinfo."""
    found: list[tuple[str, Path, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rest = left.split(), right.split()
        if len(parts) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((rest[0], Path(parts[4].replace("\\040", " ")), set(rest[2].split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """The host's own cgroup per hierarchy ("" for v2's, else each controller name)."""
    return _cgroups_of(os.getpid())


def _cgroups_of(pid: int) -> dict[str, str]:
    """Process `pid`'s cgroup per hierarchy, as /proc/<pid>/cgroup names it for this host."""
    groups: dict[str, str] = {}
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return groups
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            groups[controller] = path
    return groups


def _probe_v2() -> tuple[Mechanism | None, str]:
    mounts = [m for m in _mounts() if m[0] == "cgroup2"]
    own = _own_cgroups().get("")
    if not mounts or own is None:
        return None, "no cgroup v2 hierarchy is mounted"
    parent = mounts[0][1] / own.lstrip("/")
    probe = _try_create(parent)
    if isinstance(probe, str):
        return None, probe
    try:
        needed = ("cgroup.freeze", "cgroup.kill", "cpu.stat", "cgroup.procs", "cgroup.threads")
        missing = [n for n in needed if not (probe / n).exists()]
        if missing:
            return None, f"the kernel's v2 groups lack {', '.join(missing)} (a kernel before 5.14)"
        memory = (probe / "memory.max").exists()
    finally:
        _rmdir(probe)
    why = "" if memory else ("the memory controller is not enabled for these groups: memory is read per process "
                             "over the group's members, and enforced by the host's watchdog")
    return Mechanism("cgroup2", {"unified": parent}, memory), why


def _probe_v1() -> tuple[Mechanism | None, str]:
    own = _own_cgroups()
    points: dict[str, Path] = {}
    for fstype, point, options in _mounts():
        for controller in _V1_CONTROLLERS:
            if fstype == "cgroup" and controller in options and controller in own:
                points.setdefault(controller, point / own[controller].lstrip("/"))
    missing = [c for c in ("freezer", "cpuacct") if c not in points]
    if missing:
        return None, f"no v1 {' or '.join(missing)} hierarchy is mounted"
    parents = {}
    for controller, parent in points.items():
        probe = _try_create(parent)
        if isinstance(probe, str):
            if controller == "memory":
                continue
            return None, f"{controller}: {probe}"
        _rmdir(probe)
        parents[controller] = parent
    memory = "memory" in parents
    why = "" if memory else "no writable v1 memory hierarchy: memory is enforced by the host's watchdog"
    return Mechanism("cgroup1", parents, memory), why


def _trial(mechanism: Mechanism) -> str:
    """Why a process cannot enter a group of `mechanism` through the launcher ("" when it can)."""
    try:
        group = Group(mechanism)
    except ContainmentError as exc:
        return str(exc)
    try:
        done = subprocess.run(group.launcher() + ["true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"a process could not enter a new group: {exc}"
    finally:
        group.remove()
    if done.returncode != 0:
        return f"a process could not enter a new group: {done.stderr.strip()[-300:]}"
    return ""


def _try_create(parent: Path) -> Path | str:
    """A fresh group under `parent` (the caller removes it), or why none can be made."""
    path = parent / _unique_name()
    try:
        path.mkdir()
    except PermissionError:
        return f"{parent} is not writable by this user (run as root, or delegate a cgroup to it)"
    except OSError as exc:
        return f"cannot create a group under {parent}: {exc.strerror or exc}"
    return path


def _unique_name() -> str:
    return f"kernelopt-{os.getpid()}-{next(_counter)}"


def _rmdir(path: Path, wait_s: float = 0.0) -> bool:
    """Remove an (empty) group, retrying while its last tasks finish exiting."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def _read_ints(path: Path) -> list[int]:
    try:
        return [int(word) for word in path.read_text().split()]
    except (OSError, ValueError):
        return []


def _read_keyed(path: Path) -> dict[str, int]:
    """A cgroup file of "key value" lines (cpu.stat, memory.stat, memory.events) as a dict;
    empty where it cannot be read, lines whose value is no integer left out."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.partition(" ")[::2] for line in lines)
    return {key: int(value) for key, value in pairs if value.isdigit()}


class Group:
    """One worker's kernel-enforced group. Create it, start the worker through `launcher()`
    (the worker enters the group before it execs the sandbox), then read and act on every
    member; `remove()` kills what is left and deletes the group."""

    def __init__(self, mechanism: Mechanism):
        if mechanism.name == "none":
            raise ContainmentError("no containment mechanism: nothing to create")
        self.mechanism = mechanism
        self.name = _unique_name()
        self.v2 = mechanism.name == "cgroup2"
        self._main = mechanism.parents["unified" if self.v2 else "freezer"] / self.name
        self.paths: dict[str, Path] = {}
        try:
            for hierarchy, parent in mechanism.parents.items():
                path = parent / self.name
                path.mkdir()
                self.paths[hierarchy] = path
        except OSError as exc:
            self.remove()
            raise ContainmentError(f"cannot create the worker's group: {exc}") from None
        with _live_lock:
            _live.add(self)

    adopted_by = ""  # the runtime that made the group (a container's: "docker"), where it was adopted

    @classmethod
    def adopt(cls, pid: int, runtime: str, container_id: str) -> Group | None:
        """The group a process already lives in, made by a container runtime (`runtime`: its
        name, the verdict's containment kind): the host then freezes, charges, reads and kills
        the container's processes through the kernel's files itself, as it does its own groups',
        instead of through the runtime's pause and stats (a daemon round trip each). None where
        this host cannot write the group's files (a remote or rootless daemon, another cgroup
        namespace): the caller keeps the runtime's own controls. The runtime removes the group.
        Only a group named for `container_id` is adopted (cgroupfs: .../docker/<id>; systemd:
        docker-<id>.scope): never the host's own group, which a process outside any container,
        or a runtime that placed it elsewhere, would name."""
        own = {hierarchy: path for hierarchy, path in _cgroups_of(pid).items()
               if container_id and container_id in path.rsplit("/", 1)[-1]}
        mounts = _mounts()
        v2 = next((point for fstype, point, _ in mounts if fstype == "cgroup2"), None)
        v1: dict[str, Path] = {}
        for fstype, point, options in mounts:
            for controller in _V1_CONTROLLERS:
                if fstype == "cgroup" and controller in options and controller in own:
                    v1.setdefault(controller, point / own[controller].lstrip("/"))
        if "freezer" in v1 and "cpuacct" in v1:
            mechanism = Mechanism("cgroup1", v1, "memory" in v1)
            needed = [v1["freezer"] / "freezer.state", v1["cpuacct"] / "cpuacct.usage"]
        elif v2 is not None and own.get("", "/") != "/":
            path = v2 / own[""].lstrip("/")
            mechanism = Mechanism("cgroup2", {"unified": path}, (path / "memory.max").exists())
            needed = [path / "cgroup.freeze", path / "cpu.stat"]
        else:
            return None
        if not all(os.access(file, os.W_OK if file.name.endswith(("state", "freeze")) else os.R_OK)
                   for file in needed):
            return None
        group = cls.__new__(cls)
        group.mechanism = mechanism
        group.v2 = mechanism.name == "cgroup2"
        group.paths = dict(mechanism.parents)
        group._main = group.paths["unified" if group.v2 else "freezer"]
        group.name = group._main.name
        group.adopted_by = runtime
        if pid not in group.members():
            return None  # the process left (or another namespace names the path differently)
        return group

    @property
    def kind(self) -> str:
        return self.adopted_by or self.mechanism.name

    def record(self) -> str:
        if self.adopted_by:
            return (f"{self.adopted_by}: the container's own cgroup ({self.mechanism.name}), frozen, charged and "
                    "killed by the host through the kernel's files")
        return self.mechanism.record()

    def attach(self, pid: int) -> None:
        """Nothing to do: the process entered the group itself (launcher)."""

    # -- entering -----------------------------------------------------------------------------

    def launcher(self) -> list[str]:
        """The prefix of a command line that moves the process into this group and then execs
        the rest of the line: everything the command starts is born inside."""
        files = [str(path / "cgroup.procs") for path in self.paths.values()]
        script = ('n=$1; shift; while [ "$n" -gt 0 ]; do '
                  'echo $$ > "$1" || { echo "kernelopt: cannot enter the worker\'s cgroup ($1)" >&2; exit 125; }; '
                  'shift; n=$((n-1)); done; exec "$@"')
        return ["/bin/sh", "-c", script, "kernelopt-enter", str(len(files)), *files]

    # -- reading ------------------------------------------------------------------------------

    def members(self) -> list[int]:
        """Every process in the group (its thread-group ids), a process whose leader thread has
        exited while others run included; processes that have fully exited are not members."""
        return sorted(set(_read_ints(self._main / "cgroup.procs")))

    def threads(self) -> list[int]:
        """Every live thread of every member."""
        return _read_ints(self._main / ("cgroup.threads" if self.v2 else "tasks"))

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by everything that ever ran in the group, exited tasks included."""
        if self.v2:
            usage = _read_keyed(self._main / "cpu.stat").get("usage_usec")
            return usage / 1e6 if usage is not None else None
        values = _read_ints(self.paths["cpuacct"] / "cpuacct.usage")
        return values[0] / 1e9 if values else None

    def memory_bytes(self) -> int:
        """The memory the group holds that no reclaim can free: what the host's watchdog holds to
        the limit. The resident memory of every member (read through a live thread where the
        leader has exited), or, where a memory controller covers the group and counts more, its
        anonymous and shared-memory pages: a file written to a tmpfs is held by nobody's
        resident memory, and the controller's whole count also holds reclaimable page cache."""
        resident = sum(resident_bytes(pid) for pid in self.members())
        return max(resident, self._unreclaimable_charge())

    def _unreclaimable_charge(self) -> int:
        """Anonymous plus shared-memory bytes charged to the group (its memory.stat); 0 without
        a memory controller."""
        if not self.mechanism.memory:
            return 0
        stat = _read_keyed((self.paths["unified"] if self.v2 else self.paths["memory"]) / "memory.stat")
        return sum(stat.get(key, 0) for key in (("anon", "shmem") if self.v2 else ("rss", "shmem")))

    def oom_killed(self) -> bool:
        """Whether the kernel's memory limit killed a task of the group."""
        if not self.mechanism.memory:
            return False
        path = self.paths["unified"] / "memory.events" if self.v2 else self.paths["memory"] / "memory.oom_control"
        return _read_keyed(path).get("oom_kill", 0) > 0

    # -- acting -------------------------------------------------------------------------------

    def limit_memory(self, limit_bytes: int) -> bool:
        """Set the kernel's memory limit of the group; False where no memory controller covers it."""
        if not self.mechanism.memory:
            return False
        path = self.paths["unified"] / "memory.max" if self.v2 else self.paths["memory"] / "memory.limit_in_bytes"
        try:
            path.write_text(str(int(limit_bytes)))
            return True
        except OSError:
            return False

    def freeze(self, timeout_s: float = FREEZE_TIMEOUT_S) -> bool:
        """Stop every thread of every member at once, and wait until the kernel reports the group
        frozen. False if it did not report so in time (the group stays set to freeze)."""
        return self._set_frozen(True, timeout_s)

    def thaw(self, timeout_s: float = FREEZE_TIMEOUT_S, wait: bool = True) -> bool:
        """Let the group run; with `wait` False, return once the kernel has the request (a
        call's frame waits in the pipe for the worker: the host's clock already runs)."""
        return self._set_frozen(False, timeout_s if wait else 0.0)

    def _set_frozen(self, frozen: bool, timeout_s: float) -> bool:
        try:
            if self.v2:
                (self._main / "cgroup.freeze").write_text("1" if frozen else "0")
            else:
                (self._main / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
        except OSError:
            return False
        if timeout_s <= 0:
            return True
        deadline, pause = time.monotonic() + timeout_s, 2e-5
        while True:
            if self.is_frozen() == frozen:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.005)

    def is_frozen(self) -> bool:
        try:
            if self.v2:
                return "frozen 1" in (self._main / "cgroup.events").read_text().splitlines()
            return (self._main / "freezer.state").read_text().strip() == "FROZEN"
        except OSError:
            return False

    def kill(self, wait_s: float = 5.0) -> bool:
        """SIGKILL every member, and wait until the group is empty (True when it is).

        v2's cgroup.kill first; then a SIGKILL to every member and thread the group still lists,
        because cgroup.kill (Linux 6.18 here) passes over a process whose leader thread has
        exited: its other threads kept running. v1 freezes the group first, so that no member
        can fork while the others are killed, and thaws it for the kills to land."""
        deadline = time.monotonic() + wait_s
        while True:
            if self.v2:
                try:
                    (self._main / "cgroup.kill").write_text("1")
                except OSError:
                    pass
            else:
                self._set_frozen(True, 0.5)
            for task in set(self.members()) | set(self.threads()):
                try:
                    os.kill(task, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if not self.v2:
                self._set_frozen(False, 0.5)
            if not self.threads():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill whatever is left and delete the group (every hierarchy's directory); an adopted
        group's directories are its runtime's to delete."""
        if self.adopted_by:
            self.kill(wait_s=1.0)
            return
        if self._main in self.paths.values():
            self.kill()
        for hierarchy, path in list(self.paths.items()):
            if _rmdir(path, wait_s=5.0):
                del self.paths[hierarchy]
        if not self.paths:
            with _live_lock:
                _live.discard(self)


@atexit.register
def _remove_all() -> None:
    """Groups still standing when the host exits (a crash between start and close) go with it."""
    with _live_lock:
        groups = list(_live)
    for group in groups:
        group.remove()


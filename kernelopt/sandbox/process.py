"""A worker process as the host sees it: start, request/reply with deadlines, kill.

The worker enters a kernel-enforced group before it execs its sandbox (containment.py: a cgroup
per worker where the machine offers one, else the degraded walk of its process tree), so the
host finds, freezes, charges and kills everything it starts however it detaches. A watchdog
thread sums the resident memory of the group and kills it past the limit (an address-space
rlimit would break CUDA, which reserves large virtual ranges); where a memory controller covers
the group, the kernel's limit backs it. Replies come over a dedicated pipe; whatever the program
prints goes to a log file the host reads back, size-capped.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any
from pathlib import Path

from kernelopt.sandbox import containment, isolation, process_tree
from kernelopt.sandbox.device_slots import Keeper, WorkerSlots
from kernelopt.sandbox.input_files import (INPUT_SLOT_BYTES, PLACEMENT_WINDOW_BYTES, FileInputSlot, InputSlot,
                                           transport_note)
from kernelopt.sandbox.outbox import Outbox
from kernelopt.sandbox.process_memory import ProcessMemory
from kernelopt.sandbox.device import ram_bytes
from kernelopt.sandbox.sizes import parse_size
from kernelopt.sandbox.worker import commands, wire

_SANDBOX_DIR = Path(__file__).resolve().parent  # holds the `worker` package
_BOOT = (
    "import sys; sys.path.insert(0, {path!r}); "
    "from worker.main import main; main(sys.argv[1:])"
)
LOG_TAIL_BYTES = 16 << 10
_WATCH_INTERVAL_S = 0.05
# The kernel's memory limit of a worker's group, where a memory controller covers it: a backstop
# above the watchdog's (it also counts page cache), against allocations faster than its interval.
KERNEL_MEMORY_MARGIN = 1.125
HOST_MEMORY_EIGHTHS = 3  # the host holds what workers send within 3/8 of the RAM, as a worker may...
AVAILABLE_RESERVE_SHARE = 16  # ...and only while the machine keeps 1/16 of it available
# Whom the kernel kills first when the machine runs out of memory (oom_score_adj, -1000..1000):
# the candidate's worker, then the reference's, never the host before them. Memory no watchdog
# sees (a tmpfs file, an unmapped memfd) must not cost the run its host.
OOM_SCORE_ADJ = {"candidate": 1000, "reference": 500}


def host_memory_budget() -> int:
    """The resident memory the host may reach by reading what workers send (input sets, outputs):
    3/8 of the RAM, as each worker by default, or `KERNELOPT_HOST_MEMORY` (a size: 512M, 6G)."""
    configured = os.environ.get("KERNELOPT_HOST_MEMORY")
    if configured:
        try:
            return parse_size(configured)
        except ValueError as exc:
            raise SandboxError(f"KERNELOPT_HOST_MEMORY: {exc}") from None
    return ram_bytes() * HOST_MEMORY_EIGHTHS // 8


def host_memory_room(needed: int) -> int:
    """How many bytes the host may read from workers now: the least of its budget less its
    resident memory (input slots' shared pages included) and what the machine has available
    beyond a reserve of 1/16 of the RAM (for the workers, which grow while the host reads).
    Without such a check, a KernelBench problem whose input sets are GiBs took the machine's
    memory, the kernel killed the host, and a `bench` run died with it. Where the room is less
    than `needed`, garbage is collected first: an evaluation's data lives in reference cycles
    until a full collection."""
    room = _room_now()
    if room < needed:
        gc.collect()
        room = _room_now()
    return room


def _room_now() -> int:
    return max(0, min(room_parts()))


def room_parts() -> tuple[int, int]:
    """The two bounds of the host's room (bytes): what its budget leaves beyond its resident
    memory, and what the machine's available memory leaves beyond the reserve. Only the
    second depends on the workers (a worker that holds GiBs takes it)."""
    return host_memory_budget() - host_resident_bytes(), _available() - ram_bytes() // AVAILABLE_RESERVE_SHARE


def host_resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _available() -> int:
    """MemAvailable of /proc/meminfo (the kernel's estimate of what can be allocated without
    swapping), in bytes; the free pages where the file says nothing of it."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def kernel_oom_kills() -> int:
    """How many processes the kernel's OOM killer has killed since boot (/proc/vmstat); 0 where
    it does not say."""
    try:
        with open("/proc/vmstat") as vmstat:
            for line in vmstat:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class WorkerDied(RuntimeError):
    """The worker exited (or was killed) before replying."""

    def __init__(self, description: str, memory_exceeded: bool = False):
        super().__init__(description)
        self.memory_exceeded = memory_exceeded


class HostOutOfRoom(WorkerDied):
    """The host refused a worker's reply of `needed` bytes for want of memory, before reading
    any of it. `budget_room` and `available_room`: the two bounds of its room then
    (`room_parts`); `worker_bytes`: the refused worker's resident memory then. Whom to blame is
    the conversation's call: a candidate holding far more than the reference can take the
    machine's memory the reference's reply needs."""

    def __init__(self, description: str, needed: int, budget_room: int, available_room: int, worker_bytes: int):
        super().__init__(description)
        self.needed, self.budget_room, self.available_room = needed, budget_room, available_room
        self.worker_bytes = worker_bytes


class MachineOutOfMemory(WorkerDied):
    """The kernel's OOM killer took the worker: the machine ran out of memory. Whom to blame is
    the conversation's call (`peak_bytes`: the most the watchdog saw the worker hold): a
    candidate that held far more than the reference, or an evaluation that does not fit."""

    def __init__(self, description: str, peak_bytes: int):
        super().__init__(description, memory_exceeded=True)
        self.peak_bytes = peak_bytes


class SandboxError(RuntimeError):
    """The harness itself failed (a worker could not start): neither party is at fault."""


class DaemonGone(SandboxError):
    """The container runtime's daemon stopped answering while a worker's request was in flight:
    the worker's end is the environment's failure, not a verdict on either program."""


class WorkerTimeout(TimeoutError):
    """The deadline passed before the worker replied; the worker has been killed."""


class WorkerProcess:
    def __init__(self, role: str, backend: isolation.Backend, scratch: Path, device: str,
                 memory_limit: int, max_reply_bytes: int = 16 << 30, keeper: Keeper | None = None):
        self.role = role
        self.scratch = scratch
        self.memory_limit = memory_limit
        self.memory_exceeded = False
        (scratch / "tmp").mkdir(parents=True, exist_ok=True)
        self._oom_kills_at_start = kernel_oom_kills()
        self.peak_bytes = 0  # the most the watchdog saw the group hold
        self.log_path = scratch.parent / f"{role}.log"
        self.frozen = False  # the host froze the group (a call answered); the next send thaws it
        self.memory: ProcessMemory | None = None  # the worker's memory, opened at its hello
        self.slots: WorkerSlots | None = None  # its device slots (device_slots.py), where a keeper makes them
        self._fds: socket.socket | None = None  # where descriptors of device slots go to the worker
        self.outbox: Outbox | None = None  # the reference's, once the host knows its sets' size (outbox.py)
        self.set_bytes = 0  # the largest input set this worker has made
        self.wakeup_filter: str | None = None  # a candidate's, from its hello: "" once wake-up sources are denied, else why not
        environment = isolation.scrubbed_environment(scratch, _device_environment(device))
        # A container gets no descriptors beyond its attached streams: its slot is a tmpfs file,
        # bind-mounted read-only (input_files.py).
        self.inputs: InputSlot | FileInputSlot | None
        self.process: Any  # a subprocess.Popen, or a containers.ContainerProcess shaped like one
        self.contained: containment.Group | process_tree.TreeWalk
        self.cgroup_escape = ""  # how the worker could leave its group (isolation.cgroup_escape)
        if backend.name == "docker":
            if backend.image is None:
                raise SandboxError("the docker backend has no sandbox image (select_backend sets one)")
            from kernelopt.sandbox import containers

            self.process, self.inputs = containers.start_worker(
                backend.image, role, scratch, device, memory_limit, environment, self.log_path,
                INPUT_SLOT_BYTES, PLACEMENT_WINDOW_BYTES)
            self._cmd_write, self._out_read = self.process.channel
            # The container's own cgroup, acted on through the kernel's files where this host can
            # write them (a local daemon); else through the daemon (pause, stats).
            adopted = containment.Group.adopt(self.process.pid, "docker", self.process.container.id)
            self.contained = adopted or process_tree.ContainerWalk(self.process.container)
            self.contained.attach(self.process.pid)
            if adopted is None:  # a remote or rootless daemon: its processes are not this host's to read
                self.inputs.close()
                self.inputs = None  # inputs and outputs travel in frames (calls.transport_for)
        else:
            cmd_read, self._cmd_write = wire.pipe()
            self._out_read, out_write = wire.pipe()
            self.inputs = InputSlot(role)
            boot = _BOOT.format(path=str(_SANDBOX_DIR))
            self._fds, fds_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            fds = (cmd_read, out_write, self.inputs.fd, fds_theirs.fileno())
            command = [sys.executable, "-E", "-s", "-c", boot, "--role", role,
                       "--cmd-fd", str(cmd_read), "--out-fd", str(out_write), "--inputs-fd", str(self.inputs.fd),
                       "--fds-fd", str(fds_theirs.fileno())]
            command = isolation.wrap_command(backend, command, scratch, device, fds)
            self.contained = containment.for_worker(containment.current())
            if isinstance(self.contained, containment.Group):
                self.cgroup_escape = isolation.cgroup_escape(backend)
            self.contained.limit_memory(int(memory_limit * KERNEL_MEMORY_MARGIN))
            try:
                with open(self.log_path, "wb") as log:
                    self.process = subprocess.Popen(
                        self.contained.launcher() + command, stdin=subprocess.DEVNULL, stdout=log,
                        stderr=subprocess.STDOUT, pass_fds=fds, cwd=scratch, start_new_session=True, env=environment,
                    )
            except BaseException:
                self.contained.remove()
                raise
            self.contained.attach(self.process.pid)
            fds_theirs.close()
            if keeper is not None:
                self.slots = WorkerSlots(keeper, self.inputs.fd, self.inputs.size)
            os.close(cmd_read)
            os.close(out_write)
        os.set_blocking(self._cmd_write, False)  # sends wait with a deadline (see send)
        self._reader = wire.FrameReader(self._out_read, max_blob_bytes=max_reply_bytes, room=host_memory_room)
        self._stop_watch = threading.Event()
        self._closing, self._closed = threading.Lock(), False
        threading.Thread(target=self._watch_memory, daemon=True).start()

    def send(self, message: dict, blobs: Sequence[bytes] = (), deadline: float | None = None) -> None:
        """Write a frame (thawing the worker's group first where the host froze it); a worker
        that stops reading (hung, or busy past `deadline`) is killed, as one that stops
        answering is."""
        if self.frozen:
            self.thaw()
        try:
            wire.write_frame(self._cmd_write, message, blobs, deadline)
        except wire.ChannelTimeout:
            self.kill()
            raise self._blame(WorkerTimeout(f"{self.role} worker did not take its input in time")) from None
        except OSError:  # BrokenPipeError: the worker is gone
            raise self._blame(self._death()) from None

    def send_inputs(self, message: dict, packed: bytes, deadline: float, at: int = 0) -> None:
        """A frame with one input set (`place_inputs`, then the frame)."""
        placed = self.place_inputs(packed, at)
        self.send(dict(message, **placed), [] if placed else [packed], deadline)

    def slot_holds(self, end: int) -> bool:
        """Whether the input slot reaches byte `end` (a set that does not travels as a blob)."""
        return self.inputs is not None and end <= self.inputs.size

    def place_inputs(self, packed: bytes, at: int = 0) -> dict:
        """Write one input set into the worker's input slot at byte `at` and return what the
        call frame says of where (empty where there is no slot, or it does not fit: the inputs
        then travel as the frame's blob)."""
        if self.inputs is not None and self.inputs.put(packed, at):
            return {"slot": len(packed), "at": at}
        return {}

    def send_descriptors(self, fds: list[int]) -> None:
        """Pass descriptors (device slots) to the worker, which takes them with the next frame."""
        if self._fds is None:
            raise SandboxError("this worker takes no descriptors")
        try:
            socket.send_fds(self._fds, [b"d"], fds)
        except OSError:
            raise self._death() from None

    @property
    def takes_descriptors(self) -> bool:
        return self._fds is not None

    def replace_outbox(self, outbox: Outbox) -> None:
        """Pass the worker a new outbox (it takes the descriptor with the next `inputs` frame)."""
        self.send_descriptors([outbox.fd])
        if self.outbox is not None:
            self.outbox.close()
        self.outbox = outbox

    def request(self, message: dict, deadline: float) -> tuple[dict, list[bytes]]:
        """Send a command; wait for its reply until `deadline` (time.monotonic)."""
        self.send(message)
        return self.receive(deadline)

    def receive(self, deadline: float) -> tuple[dict, list[bytes]]:
        try:
            return self._reader.read(deadline)
        except wire.ChannelTimeout:
            self.kill()
            raise self._blame(WorkerTimeout(f"{self.role} worker did not answer in time")) from None
        except wire.ChannelClosed:
            raise self._blame(self._death()) from None
        except wire.BlobsTooLarge as exc:
            raise self._out_of_room(exc.size, exc.limit) from None
        except wire.ProtocolError as exc:
            self.kill()
            raise self._blame(WorkerDied(f"{self.role} worker broke the protocol: {exc}")) from None

    def claim_room(self, needed: int) -> None:
        """Room in the host's memory for `needed` bytes of this worker's (input sets it put in
        the outbox, copied out next), as a reply's blobs must have: HostOutOfRoom otherwise."""
        room = host_memory_room(needed)
        if room < needed:
            raise self._out_of_room(needed, room)

    def _out_of_room(self, needed: int, room: int) -> HostOutOfRoom:
        """The worker is killed: what it sent cannot be taken (the conversation blames it)."""
        budget_room, available_room = room_parts()
        worker_bytes = self.contained.memory_bytes()
        self.kill()
        return HostOutOfRoom(f"{self.role} worker's reply needs {needed / 2**30:.2f} GiB of the host's memory, "
                             f"which has room for {room / 2**30:.2f} GiB more (its budget is "
                             f"{host_memory_budget() / 2**30:.2f} GiB, 3/8 of the RAM unless KERNELOPT_HOST_MEMORY "
                             "sets it, and 1/16 of the RAM is kept available for the workers): out of memory on "
                             "the host", needed, budget_room, available_room, worker_bytes)

    def _blame(self, failure: Exception) -> Exception:
        """What a worker's death or silence (`failure`) is blamed on. A container's worker looks
        the same from here when the daemon that runs it dies (the daemon may take the container
        down with it, or leave it running unpaused): so the daemon is asked, and where it does not answer, the failure is the
        environment's (DaemonGone), no verdict on the candidate nor an error of the problem."""
        silent = getattr(self.process, "daemon_silent", None)
        reason = silent() if silent is not None else None
        if reason is None:
            return failure
        self.kill()  # the container's processes outlive their daemon: the host's kill ends them
        return DaemonGone(f"the Docker daemon stopped answering while the {self.role} worker's request was in "
                          f"flight ({reason}); the worker's end ({failure}) is no verdict on either program: "
                          "start the daemon again (docker info must work) and rerun")

    def _death(self) -> WorkerDied:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.wait()
        if self.memory_exceeded or self.contained.oom_killed():
            self.memory_exceeded = True
            return WorkerDied(f"{self.role} worker exceeded the memory limit of "
                              f"{self.memory_limit / 2**30:.2f} GiB and was killed", True)
        # SIGKILL, seen directly or through the sandbox's wrapper (bwrap exits 128 + the signal).
        if code in (-signal.SIGKILL, 128 + signal.SIGKILL) and kernel_oom_kills() > self._oom_kills_at_start:
            self.memory_exceeded = True
            return MachineOutOfMemory(f"{self.role} worker was killed by the kernel when the machine ran out of "
                                      f"memory (it held up to {self.peak_bytes / 2**30:.2f} GiB; the candidate's "
                                      "worker is the kernel's first choice, the reference's the next)",
                                      self.peak_bytes)
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else -code
            hint = ""
            if code == -signal.SIGSEGV and isinstance(self.inputs, FileInputSlot):
                hint = (" (in a container a call's CPU inputs are mapped read-only, so a program that writes "
                        "into its inputs in place faults: copy them first, or judge with --sandbox bubblewrap)")
            return WorkerDied(f"{self.role} worker was killed by signal {name}{hint}")
        return WorkerDied(f"{self.role} worker exited with code {code}")

    @property
    def containment_kind(self) -> str:
        """What contains this worker's processes: cgroup2, cgroup1, none (the tree walk), or
        docker (the container's own cgroup)."""
        return self.contained.kind

    @property
    def containment_record(self) -> str:
        """The same, with why no stronger mechanism is used (and how the worker could leave its
        group, where the backend lets it), for the verdict's isolation record."""
        record = self.contained.record()
        if self.contained.kind == "docker" or isinstance(self.contained, process_tree.ContainerWalk):
            record += transport_note(self.inputs is not None and self.memory is not None)
        return record + (f"; escapable: {self.cgroup_escape}" if self.cgroup_escape else "")

    @property
    def kernel_memory_limit(self) -> bool:
        """Whether the kernel's memory limit covers the worker's group."""
        return isinstance(self.contained, containment.Group) and self.contained.mechanism.memory

    def record_baseline(self) -> None:
        """Call once the worker said hello: the processes of the sandbox (bwrap, the worker)
        and the threads of the group at that point are the harness's own."""
        self.worker_pid = process_tree.leaf_of_chain(self.process.pid)
        # Before any program code runs: the host reads this address space from now on (not a
        # container's behind a daemon whose processes are not this host's: it has no slot then).
        self.memory = ProcessMemory.open(self.worker_pid, self.inputs.name) if self.inputs is not None else None
        if isinstance(self.inputs, FileInputSlot):
            self.inputs.unlink()  # mapped now: the file goes with the host's descriptor, whatever ends it
        self._rank_for_the_oom_killer()
        if isinstance(self.contained, process_tree.TreeWalk):
            self.contained.worker_pid = self.worker_pid
        self.baseline_processes = len(self._members())
        self.baseline_threads = self.thread_count()

    def _members(self) -> list[int]:
        return self.contained.members()

    def _rank_for_the_oom_killer(self) -> None:
        """Set the group's processes' OOM priority (OOM_SCORE_ADJ), before any of the program's
        code runs: what they start inherits it, and lowering it again needs a privilege the
        sandboxes drop. Where it cannot be written, the kernel's own choice stands."""
        adjust = OOM_SCORE_ADJ.get(self.role)
        if adjust is None:
            return
        for pid in self._members():
            try:
                with open(f"/proc/{pid}/oom_score_adj", "w") as handle:
                    handle.write(str(adjust))
            except OSError:
                pass

    def extra_processes(self) -> int:
        """Processes in the worker's group beyond the harness's own, read by the host from the
        kernel, so a candidate cannot hide them (a process whose leader thread exited, a double
        fork into a new session: members all the same)."""
        return len(self._members()) - self.baseline_processes

    def thread_growth(self) -> int:
        return self.thread_count() - self.baseline_threads

    def thread_count(self) -> int:
        """Live threads of every process in the group."""
        return len(self.contained.threads())

    def thread_names(self) -> list[str]:
        """The group's thread names (/proc's comm), for messages: a driver's thread is named."""
        names = []
        for tid in self.contained.threads():
            try:
                with open(f"/proc/{tid}/comm", encoding="utf-8", errors="replace") as f:
                    names.append(f.read().strip())
            except OSError:
                pass
        return names

    @property
    def cheap_cpu_clock(self) -> bool:
        """Whether `cpu_seconds` is a kernel read (a group's file, a process's clock), cheap enough
        to bracket every timed call; a container's comes from its daemon's stats (a round trip).
        A container whose cgroup the host adopted is not timed by it either: on a cgroup v1 host
        (the 2-core VM) its cpuacct clock put exact copies at 0.2x-0.5x (the fresh candidate
        container read slow, the warm reference's did not) where the wall clock reads 0.9x-1.05x;
        until that is understood, containers are timed by the wall clock."""
        return not isinstance(self.contained, process_tree.ContainerWalk) and self.contained.kind != "docker"

    def cpu_seconds(self) -> float | None:
        """The CPU time the worker's group has used so far, every process and thread together,
        those that have exited included (the kernel's accounting, read from the host). Under the
        degraded tree walk: the worker process's CPU clock alone; a container's from its
        daemon's stats. None where it cannot be read."""
        if getattr(self, "worker_pid", None) is None:
            return None
        return self.contained.cpu_seconds()

    def runqueue_wait_ms(self) -> float | None:
        """How long the worker's main thread has waited for a core so far (ms; the kernel's
        /proc/<pid>/schedstat), or None where the kernel does not say."""
        pid = getattr(self, "worker_pid", None)
        return None if pid is None else runqueue_wait_ms(f"/proc/{pid}/schedstat")

    def freeze(self) -> None:
        """Stop every thread of every process of this worker's group at once (the kernel's
        freezer; SIGSTOP per process under the tree walk), and wait until they are, so that none
        of its code runs, not even a signal handler, while the host reads what a call left or
        the other worker is timed (a container: paused by its daemon)."""
        if not self.contained.freeze() and isinstance(self.contained, process_tree.ContainerWalk):
            # Paused through its daemon: a daemon gone mid-evaluation (the worker's channel does
            # not pass through it) would leave this side running through the other's turn.
            failure = self._blame(WorkerDied(f"the {self.role} worker's container could not be paused"))
            if isinstance(failure, DaemonGone):
                raise failure
        self.frozen = True

    def thaw(self) -> None:
        """Let the group run again; the host does not wait for the kernel to say so (its next
        frame waits in the pipe until the worker reads it)."""
        self.frozen = False
        self.contained.thaw(wait=False)

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - LOG_TAIL_BYTES))
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def close(self, ask: bool = True) -> None:
        """Ask the worker to quit, then make sure its whole tree is gone. A frozen worker is not
        asked (it could not read the request, and the host would wait out the timeout for each
        candidate), nor one closed without `ask` (an interrupt): its group is killed as it is.

        Once only, whichever thread comes first: a descriptor closed twice closes whatever the
        process opened in between under the same number (an interrupt's second close once shut
        the directory `rmtree` was walking). Without `ask`, another thread may still be reading
        the worker's pipe: its descriptors and slots are left to the process's exit, which an
        interrupt is about to reach; the kill gives that reader its end of file."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
        if not ask:
            self.kill()
            self.contained.remove()
            return
        if self.process.poll() is None and not self.frozen:
            try:
                wire.write_frame(self._cmd_write, commands.quit_(), deadline=time.monotonic() + 2.0)
                self.process.wait(timeout=2.0)
            except (OSError, wire.ChannelTimeout, subprocess.TimeoutExpired):
                pass
        self.kill()
        for fd in (self._cmd_write, self._out_read):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.inputs is not None:
            self.inputs.close()
        if self.memory is not None:
            self.memory.close()
        if self.slots is not None:
            self.slots.close()
            self.slots = None
        if self.outbox is not None:
            self.outbox.close()
            self.outbox = None
        if self._fds is not None:
            self._fds.close()
        self.contained.remove()

    def kill(self) -> None:
        """Kill everything in the worker's group (a container: removed with what is left in it)."""
        self._stop_watch.set()
        self.contained.kill()
        if not isinstance(self.process, subprocess.Popen):
            self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _watch_memory(self) -> None:
        """The group's resident memory, every member's (a detached process's included); a
        container's: its process tree's (its own limit holds it too)."""
        while not self._stop_watch.wait(_WATCH_INTERVAL_S):
            if self.process.poll() is not None and not self._members():
                return
            held = self.contained.memory_bytes()
            self.peak_bytes = max(self.peak_bytes, held)
            if held > self.memory_limit:
                self.memory_exceeded = True
                self.kill()
                return


def runqueue_wait_ms(schedstat_path: str) -> float | None:
    """How long a thread has waited for a core so far (ms): the second field of its
    /proc/.../schedstat, or None where the kernel does not say."""
    try:
        with open(schedstat_path) as schedstat:
            return int(schedstat.read().split()[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return None


def _device_environment(device: str) -> dict[str, str]:
    if device.startswith("cuda") or "TORCH_CUDA_ARCH_LIST" in os.environ:
        return {}
    return {"TORCH_CUDA_ARCH_LIST": isolation.DEFAULT_CUDA_ARCH_LIST_WITHOUT_GPU}

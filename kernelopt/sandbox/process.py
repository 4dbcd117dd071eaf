"""A worker process as the host sees it: start, request/reply with deadlines, kill.

The worker runs in its own session so the whole process tree can be killed; a watchdog thread
sums the resident memory of that tree and kills it past the limit (an address-space rlimit
would break CUDA, which reserves large virtual ranges). Replies come over a dedicated pipe;
whatever the program prints goes to a log file the host reads back, size-capped.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kernelopt.sandbox import isolation
from kernelopt.sandbox.worker import commands, wire

_SANDBOX_DIR = Path(__file__).resolve().parent  # holds the `worker` package
_BOOT = (
    "import sys; sys.path.insert(0, {path!r}); "
    "from worker.main import main; main(sys.argv[1:])"
)
LOG_TAIL_BYTES = 16 << 10
_WATCH_INTERVAL_S = 0.05
INPUT_SLOT_BYTES = 4 << 30  # sparse: memory is used only as far as one call's inputs reach
PLACEMENT_WINDOW_BYTES = 32 << 20  # written once up front: where a round's inputs may start


class WorkerDied(RuntimeError):
    """The worker exited (or was killed) before replying."""

    def __init__(self, description: str, memory_exceeded: bool = False):
        super().__init__(description)
        self.memory_exceeded = memory_exceeded


class SandboxError(RuntimeError):
    """The harness itself failed (a worker could not start): neither party is at fault."""


class WorkerTimeout(TimeoutError):
    """The deadline passed before the worker replied; the worker has been killed."""


class WorkerProcess:
    def __init__(self, role: str, backend: isolation.Backend, scratch: Path, device: str,
                 memory_limit: int, max_reply_bytes: int = 16 << 30):
        self.role = role
        self.scratch = scratch
        self.memory_limit = memory_limit
        self.memory_exceeded = False
        (scratch / "tmp").mkdir(parents=True, exist_ok=True)
        self.log_path = scratch.parent / f"{role}.log"
        cmd_read, self._cmd_write = os.pipe()
        self._out_read, out_write = os.pipe()
        environment = isolation.scrubbed_environment(scratch, _device_environment(device))
        # A container gets no descriptors beyond its attached streams: inputs then travel in frames.
        self.inputs = None if backend.name == "docker" else InputSlot(role)
        if backend.name == "docker":
            self.process = _start_container(backend, role, scratch, device, memory_limit, environment,
                                            cmd_read, out_write, self.log_path)
        else:
            boot = _BOOT.format(path=str(_SANDBOX_DIR))
            fds = (cmd_read, out_write, self.inputs.fd)
            command = [sys.executable, "-E", "-s", "-c", boot, "--role", role,
                       "--cmd-fd", str(cmd_read), "--out-fd", str(out_write), "--inputs-fd", str(self.inputs.fd)]
            command = isolation.wrap_command(backend, command, scratch, device, fds)
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=fds, cwd=scratch, start_new_session=True, env=environment,
                )
        os.close(cmd_read)
        os.close(out_write)
        os.set_blocking(self._cmd_write, False)  # sends wait with a deadline (see send)
        self._reader = wire.FrameReader(self._out_read, max_blob_bytes=max_reply_bytes)
        self._stop_watch = threading.Event()
        threading.Thread(target=self._watch_memory, daemon=True).start()

    def send(self, message: dict, blobs: list[bytes] = (), deadline: float | None = None) -> None:
        """Write a frame; a worker that stops reading (hung, or busy past `deadline`) is
        killed, as one that stops answering is."""
        try:
            wire.write_frame(self._cmd_write, message, blobs, deadline)
        except wire.ChannelTimeout:
            self.kill()
            raise WorkerTimeout(f"{self.role} worker did not take its input in time") from None
        except OSError:  # BrokenPipeError: the worker is gone
            raise self._death() from None

    def send_inputs(self, message: dict, packed: bytes, deadline: float, at: int = 0) -> None:
        """A `call` frame with one input set: written into the worker's input slot at byte
        `at` (the frame then says where), or carried in the frame where there is no slot."""
        if self.inputs is not None and self.inputs.put(packed, at):
            self.send(dict(message, slot=len(packed), at=at), deadline=deadline)
        else:
            self.send(message, [packed], deadline)

    def request(self, message: dict, deadline: float) -> tuple[dict, list[bytes]]:
        """Send a command; wait for its reply until `deadline` (time.monotonic)."""
        self.send(message)
        return self.receive(deadline)

    def receive(self, deadline: float) -> tuple[dict, list[bytes]]:
        try:
            return self._reader.read(deadline)
        except wire.ChannelTimeout:
            self.kill()
            raise WorkerTimeout(f"{self.role} worker did not answer in time") from None
        except wire.ChannelClosed:
            raise self._death() from None
        except wire.ProtocolError as exc:
            self.kill()
            raise WorkerDied(f"{self.role} worker broke the protocol: {exc}") from None

    def _death(self) -> WorkerDied:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.wait()
        if self.memory_exceeded:
            return WorkerDied(f"{self.role} worker exceeded the memory limit of "
                              f"{self.memory_limit / 2**30:.2f} GiB and was killed", True)
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else -code
            return WorkerDied(f"{self.role} worker was killed by signal {name}")
        return WorkerDied(f"{self.role} worker exited with code {code}")

    def record_baseline(self) -> None:
        """Call once the worker said hello: the processes of the sandbox (bwrap, the worker)
        and the worker's threads at that point are the harness's own."""
        tree = self._live_tree()
        self.worker_pid = _leaf_of_chain(self.process.pid)
        self.baseline_processes = len(tree)
        self.baseline_threads = self.thread_count()

    def extra_processes(self) -> int:
        """Processes in the sandbox beyond the harness's own, seen from the host, so a
        candidate cannot hide them (daemonized grandchildren included: in a PID namespace they
        are reparented to its init, which stays in the tree)."""
        return len(self._live_tree()) - self.baseline_processes

    def thread_growth(self) -> int:
        return self.thread_count() - self.baseline_threads

    def thread_count(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.worker_pid}/task"))
        except (OSError, AttributeError):
            return 0

    def thread_names(self) -> list[str]:
        """The worker's thread names (/proc's comm), for messages: a driver's thread is named."""
        names = []
        try:
            for tid in os.listdir(f"/proc/{self.worker_pid}/task"):
                with open(f"/proc/{self.worker_pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
                    names.append(f.read().strip())
        except (OSError, AttributeError):
            pass
        return names

    def cpu_seconds(self) -> float | None:
        """The CPU time the worker process has used so far, all its threads together, those
        that have exited included (the kernel's CPU clock of the process, read from the host,
        in nanoseconds' precision). None where the host cannot read it (a container)."""
        pid = getattr(self, "worker_pid", None)
        if pid is None or not isinstance(self.process, subprocess.Popen):
            return None
        try:
            return time.clock_gettime(_process_cpu_clock(pid))
        except OSError:
            return None

    def freeze(self) -> None:
        """Stop every process of this worker's sandbox (SIGSTOP cannot be caught, blocked or
        ignored; it stops all of a process's threads), so that none of its code runs, not even
        a signal handler in the main thread, while the other worker is timed. Containers are
        not frozen (their processes are not the host's to signal); their census still runs."""
        if not isinstance(self.process, subprocess.Popen):
            return
        self._frozen = self._live_tree()
        for pid in self._frozen:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass

    def thaw(self) -> None:
        for pid in getattr(self, "_frozen", ()):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._frozen = []

    def _live_tree(self) -> list[int]:
        return [pid for pid in [self.process.pid, *_descendants(self.process.pid)] if not _is_zombie(pid)]

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - LOG_TAIL_BYTES))
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Ask the worker to quit, then make sure its whole tree is gone."""
        if self.process.poll() is None:
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

    def kill(self) -> None:
        self._stop_watch.set()
        for pid in [self.process.pid, *_descendants(self.process.pid)]:
            try:
                os.killpg(pid, signal.SIGKILL)  # the session the worker (or a child) leads
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not isinstance(self.process, subprocess.Popen):
            self.process.kill()  # a container: removed with whatever is left in it
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _watch_memory(self) -> None:
        while not self._stop_watch.wait(_WATCH_INTERVAL_S):
            if self.process.poll() is not None:
                return
            used = sum(_rss_bytes(pid) for pid in [self.process.pid, *_descendants(self.process.pid)])
            if used > self.memory_limit:
                self.memory_exceeded = True
                self.kill()
                return


class InputSlot:
    """Shared memory through which the host hands a worker one call's inputs at a time.

    An anonymous file (memfd), sized once and sealed against resizing before the worker
    inherits it: a candidate that truncated it would otherwise make the host's next write
    fault. The host writes each input set only when the worker is about to use it, and the next
    one only after the worker has answered that call."""

    def __init__(self, role: str, size: int = INPUT_SLOT_BYTES):
        self.fd = os.memfd_create(f"kernelopt-{role}-inputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.size = size
        self._map = mmap.mmap(self.fd, size)
        # The window's pages exist before the worker maps them (it touches them once at start),
        # so moving the inputs within it from round to round costs no page faults in a call.
        window = min(size, PLACEMENT_WINDOW_BYTES)
        self._map[:window] = bytes(window)

    def put(self, packed: bytes, at: int = 0) -> bool:
        """Write one input set at byte `at` of the slot; False when it does not fit."""
        if at < 0 or at + len(packed) > self.size:
            return False
        self._map[at:at + len(packed)] = packed
        return True

    def close(self) -> None:
        try:
            self._map.close()
            os.close(self.fd)
        except (OSError, BufferError):
            pass


def _start_container(backend: isolation.Backend, role: str, scratch: Path, device: str, memory_limit: int,
                     environment: dict[str, str], cmd_read: int, out_write: int, log_path: Path):
    """The worker in a container of the sandbox image (kernelopt/sandbox/containers.py)."""
    import socket

    from kernelopt.sandbox import containers

    client = containers.connect(backend.image, device)
    uid, gid = containers.container_user()
    if os.getuid() == 0:
        os.chown(scratch, uid, gid)  # the container's unprivileged user writes its scratch
        os.chown(scratch / "tmp", uid, gid)
    config = containers.container_config(
        backend.image, containers.worker_command(role), scratch, device,
        containers.ContainerLimits(memory_bytes=memory_limit), environment,
        owner=f"{socket.gethostname()}:{os.getpid()}", uid=uid, gid=gid)
    log_path.write_bytes(b"")
    return containers.ContainerProcess(client, config, cmd_read, out_write, log_path)


def _device_environment(device: str) -> dict[str, str]:
    if device.startswith("cuda") or "TORCH_CUDA_ARCH_LIST" in os.environ:
        return {}
    return {"TORCH_CUDA_ARCH_LIST": isolation.DEFAULT_CUDA_ARCH_LIST_WITHOUT_GPU}


def _process_cpu_clock(pid: int) -> int:
    """The clock id of another process's CPU clock, as Linux's clock_getcpuclockid(3) makes it
    (CPUCLOCK_SCHED for the whole process: (~pid << 3) | 2); Python has no binding for it."""
    return (~pid << 3) | 2


def _descendants(root: int) -> list[int]:
    """All processes below `root`. Reads the kernel's per-thread children lists (cheap: cost
    follows the tree, not the machine); scans /proc where those lists are unavailable."""
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        children = _children(pid)
        if children is None:
            return _descendants_by_scan(root)
        found.extend(children)
        stack.extend(children)
    return found


def _children(pid: int) -> list[int] | None:
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []  # the process is gone
    except OSError:
        return None
    children = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                children.extend(int(c) for c in handle.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None  # a kernel without children lists
        except (OSError, ValueError):
            continue
    return children


def _descendants_by_scan(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
            ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _leaf_of_chain(pid: int) -> int:
    """The worker process: the end of the single-child chain bwrap/unshare start."""
    while True:
        children = _children(pid) or []
        if len(children) != 1:
            return pid
        pid = children[0]


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
        return stat[stat.rfind(")") + 2 :].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True  # gone


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0

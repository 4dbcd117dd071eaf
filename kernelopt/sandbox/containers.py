"""The docker isolation backend: each worker runs in a container of the sandbox image.

A worker container gets: no network, a read-only root with a tmpfs /tmp, its scratch directory
as the only writable bind mount, the image's unprivileged user, every capability dropped,
no-new-privileges, pids, memory and CPU limits, and on a CUDA device that one GPU only. The
host talks to the worker over a Unix socket of its own, bind-mounted read-only, that the worker
connects to before any program code runs (container_channel.py: the daemon is not in a call's
path); the attached stdout and stderr are the worker's log.

The host keeps its own view of the sandbox: the container's processes are ordinary processes
of this kernel, so the census, the memory watchdog and the kill of kernelopt/sandbox/process.py
work on them as on a bubblewrap sandbox's. Needs a local Linux daemon (`docker info` works)
and, for GPUs, the NVIDIA Container Toolkit.
"""

from __future__ import annotations

import functools
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kernelopt.sandbox import container_channel, input_files, process_tree
from kernelopt.sandbox.container_channel import ChannelListener, ChannelNotConnected
from kernelopt.sandbox.input_files import CONTAINER_PATH as CONTAINER_INPUTS
from kernelopt.sandbox.input_files import FileInputSlot
from kernelopt.sandbox.isolation import IsolationError
from kernelopt.sandbox.worker import wire

DEFAULT_IMAGE = "kernelopt-sandbox"
PROTOCOL_LABEL = "org.kernelopt.worker-protocol"
FLAVOUR_LABEL = "org.kernelopt.flavour"  # gpu or cpu (the Dockerfile's FLAVOUR)
OWNER_LABEL = "org.kernelopt.owner"  # host:pid of the kernelopt process that started it
WORKER_ROOT = "/opt/kernelopt"  # where the image holds the worker package
# Variables the image sets for itself: the host's values would point at the host's files.
_HOST_ONLY_VARIABLES = ("PATH", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
                        "NVIDIA_VISIBLE_DEVICES")
_SANDBOX_UID = 1000  # the image's `sandbox` user, used when the host runs as root
# How long the host waits for the daemon's answer to a ping after a worker died or went silent.
DAEMON_CHECK_S = 5.0
# How long a started container's worker may take to connect to the host's socket (a Python
# start before any import; seconds on a loaded machine).
CONNECT_TIMEOUT_S = 120.0


class DockerError(IsolationError):
    """The docker backend cannot run here; the message says what to install or build."""


@dataclass(frozen=True)
class ContainerLimits:
    memory_bytes: int
    pids: int = 1024
    cpus: float | None = None  # None: no CPU quota
    tmpfs_bytes: int = 1 << 30
    shm_bytes: int = 1 << 30


def container_config(image: str, command: list[str], scratch: Path, device: str, limits: ContainerLimits,
                     environment: dict[str, str], owner: str, uid: int, gid: int, channel_directory: str,
                     inputs_path: str | None = None) -> dict:
    """Keyword arguments of docker's `containers.create` for one worker (pure: unit-tested).
    `channel_directory`: the host's listening socket's directory (container_channel.py),
    mounted read-only; `inputs_path`: the host's input slot file (input_files.py), read-only."""
    from docker.types import DeviceRequest

    volumes = {str(scratch): {"bind": str(scratch), "mode": "rw"},
               channel_directory: {"bind": container_channel.CONTAINER_DIRECTORY, "mode": "ro"}}
    if inputs_path is not None:
        volumes[inputs_path] = {"bind": CONTAINER_INPUTS, "mode": "ro"}
        command = [*command, "--inputs-path", CONTAINER_INPUTS]

    config = {
        "image": image,
        "command": command,
        "stdin_open": False,  # the program's stdin is /dev/null
        "detach": True,
        "init": True,  # a tiny init reaps zombies, so the process census stays exact
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_bytes}"},
        "volumes": volumes,
        "working_dir": str(scratch),
        "user": f"{uid}:{gid}",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "pids_limit": limits.pids,
        "mem_limit": limits.memory_bytes,
        "memswap_limit": limits.memory_bytes,  # no swap beyond the memory limit
        "shm_size": limits.shm_bytes,
        "ipc_mode": "private",
        # Its own cgroup namespace: the other workers' groups (the reference's cgroup.events, whose
        # notifications run in the reference's context) are out of its sight on any host.
        "cgroupns": "private",
        "environment": {k: v for k, v in environment.items() if k not in _HOST_ONLY_VARIABLES},
        "labels": {OWNER_LABEL: owner},
    }
    if limits.cpus:
        config["nano_cpus"] = int(limits.cpus * 1e9)
    if device.startswith("cuda"):
        index = device.partition(":")[2] or "0"
        config["device_requests"] = [DeviceRequest(device_ids=[index], capabilities=[["gpu"]])]
    return config


def start_worker(image: str, role: str, scratch: Path, device: str, memory_limit: int, environment: dict[str, str],
                 log_path: Path, slot_bytes: int, window_bytes: int) -> tuple[ContainerProcess, FileInputSlot]:
    """A worker in a container of `image`, connected, and its input slot (input_files.py);
    the slot and the socket's directory are removed again where the container does not start."""
    client = connect(image, device)
    uid, gid = container_user()
    if os.getuid() == 0:
        os.chown(scratch, uid, gid)  # the container's unprivileged user writes its scratch
        os.chown(scratch / "tmp", uid, gid)
    inputs = FileInputSlot(role, slot_bytes, window_bytes, uid, gid)
    listener = None
    try:
        listener = ChannelListener(uid, gid)
        config = container_config(
            image, worker_command(role), scratch, device, ContainerLimits(memory_bytes=memory_limit), environment,
            owner=f"{socket.gethostname()}:{os.getpid()}", uid=uid, gid=gid,
            channel_directory=listener.directory, inputs_path=inputs.path)
        log_path.write_bytes(b"")
        return ContainerProcess(client, config, listener, log_path), inputs
    except BaseException:
        if listener is not None:
            listener.close()
        inputs.close()
        raise


def worker_command(role: str) -> list[str]:
    """The worker as the image runs it; its channel is the host's socket, mounted read-only."""
    boot = f"import sys; sys.path.insert(0, {WORKER_ROOT!r}); from worker.main import main; main(sys.argv[1:])"
    return ["python3", "-E", "-s", "-c", boot, "--role", role, "--channel-path", container_channel.CONTAINER_SOCKET]


def container_user() -> tuple[int, int]:
    """The host's own uid (so the host may signal and clean up the container's processes and
    files), or the image's sandbox user when the host runs as root: never root inside."""
    if os.getuid() == 0:
        return _SANDBOX_UID, _SANDBOX_UID
    return os.getuid(), os.getgid()


@functools.lru_cache(maxsize=None)
def connect(image: str, device: str):
    """A docker client for `image`, after checking the SDK, the daemon, the image, its worker
    protocol and (for a GPU) the NVIDIA runtime; the first connection also removes containers
    orphaned by a killed kernelopt. Raises DockerError saying what to fix (not cached)."""
    try:
        import docker
    except ImportError:
        raise DockerError("the docker backend needs the docker SDK: pip install 'kernelopt[docker]' "
                          "(or pip install docker)") from None
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:  # the SDK raises several types for an absent daemon
        raise DockerError(f"cannot reach the Docker daemon ({exc}): install Docker Engine and start it, "
                          "and make sure this user may use it (docker info must work)") from None
    check_image(client, image)
    if device.startswith("cuda"):
        check_nvidia_runtime(client.info())
    remove_orphans(client)
    input_files.remove_orphans()  # slot files of a kernelopt killed before its workers' hello
    return client


def check_image(client, image: str) -> None:
    import docker

    try:
        labels = client.images.get(image).labels or {}
    except docker.errors.ImageNotFound:
        raise DockerError(f"docker image {image!r} not found: build it from kernelopt's checkout with "
                          f"`docker build -t {image} .`") from None
    found = labels.get(PROTOCOL_LABEL)
    if found != str(wire.PROTOCOL_VERSION):
        raise DockerError(f"docker image {image!r} speaks worker protocol {found or 'none'}, this kernelopt "
                          f"speaks {wire.PROTOCOL_VERSION}: rebuild it with `docker build -t {image} .` "
                          "from this version's checkout")


def describe(client, image: str) -> str:
    """One line on the daemon, the image (its flavour, size), its worker-protocol label and
    whether GPUs are passed through (for doctor)."""
    try:
        info = client.info()
    except Exception:  # noqa: BLE001 - an answer without info: say what is known
        info = {}
    host = os.environ.get("DOCKER_HOST") or "the default socket"
    try:
        found = client.images.get(image)
        labels = found.labels or {}
        size = f", {found.attrs.get('Size', 0) / 1e9:.2f} GB"
    except Exception:  # noqa: BLE001
        labels, size = {}, ""
    flavour = labels.get(FLAVOUR_LABEL, "unknown")
    try:
        check_nvidia_runtime(info)
        gpus = "GPUs: passed through (NVIDIA runtime)"
    except DockerError:
        gpus = "GPUs: not passed through (no NVIDIA runtime in the daemon: CPU jobs only)"
    return (f"daemon {info.get('ServerVersion', '?')} at {host}; image {image} ({flavour} flavour{size}), "
            f"worker protocol {labels.get(PROTOCOL_LABEL, 'none')}; {gpus}")


def check_nvidia_runtime(info: dict) -> None:
    """GPUs reach a container through the NVIDIA Container Toolkit (a runtime or CDI specs)."""
    if "nvidia" in (info.get("Runtimes") or {}) or info.get("CDISpecDirs"):
        return
    raise DockerError("the Docker daemon has no NVIDIA runtime, so containers cannot use the GPU: install "
                      "the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure --runtime=docker`, "
                      "then restart the daemon")


def daemon_silent(client, timeout: float = DAEMON_CHECK_S) -> str | None:
    """None where the daemon answers a ping through `client` within `timeout` seconds; else why
    it did not (an error, or silence). From the host a daemon that died looks like its
    containers' workers dying: the attach streams close, or nothing more comes through them.
    The ping runs in a thread of its own, so a hung daemon costs `timeout`, not the client's."""
    outcome: dict[str, object] = {}

    def ping() -> None:
        try:
            outcome["answer"] = client.ping()
        except Exception as exc:  # noqa: BLE001 - the SDK raises several types for an absent daemon
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=ping, name="kernelopt-docker-ping", daemon=True)
    thread.start()
    thread.join(timeout)
    if "error" in outcome:
        return str(outcome["error"])
    if "answer" not in outcome:
        return f"no answer to a ping in {timeout:g} s"
    return None if outcome["answer"] else f"a ping answered {outcome['answer']!r}"


def remove_orphans(client) -> int:
    """Remove worker containers whose kernelopt process on this host is gone (a crash or
    SIGKILL skips the normal cleanup). Returns how many."""
    removed = 0
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        owner_host, _, pid = container.labels.get(OWNER_LABEL, "").rpartition(":")
        if owner_host == host and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            container.remove(force=True)
            removed += 1
    return removed


class ContainerProcess:
    """One worker container, shaped like the subprocess.Popen the host uses for other backends:
    `pid` (the container's init, as this host sees it), `poll`, `wait`, `kill`; `channel`, the
    host's (command, reply) descriptors of the worker's socket connections, which the caller
    owns; and `daemon_silent`, for the host to tell a dead daemon from a dead worker. A thread
    copies the container's attached stdout and stderr (what the program prints) to the log."""

    def __init__(self, client, config: dict, listener: ChannelListener, log_path: Path):
        self.client = client
        self.container = client.containers.create(**config)
        self.returncode: int | None = None
        try:
            attached = client.api.attach_socket(self.container.id, params={"stdout": 1, "stderr": 1, "stream": 1})
            self._socket = getattr(attached, "_sock", attached)
            self.container.start()
            self.container.reload()
            self.pid = int(self.container.attrs["State"]["Pid"])
            self._started_at = process_tree.start_time(self.pid)
        except Exception:
            self.container.remove(force=True)
            raise
        threading.Thread(target=_pump_log, args=(self._socket, log_path), daemon=True).start()
        self.channel = self._connect(listener)

    def _connect(self, listener: ChannelListener) -> tuple[int, int]:
        """The worker's connections; a worker that never connects (it died, or hung before its
        first import) is killed and gets a channel already closed, so the host meets it as a
        worker that died before its hello (the log and exit code say why)."""
        try:
            return listener.accept(self.pid, lambda: self.poll() is None, CONNECT_TIMEOUT_S)
        except ChannelNotConnected:
            self.kill()
            commands_read, commands_write = os.pipe()
            replies_read, replies_write = os.pipe()
            for end in (commands_read, replies_write):
                os.close(end)
            return commands_write, replies_read
        except BaseException:
            self.kill()
            raise

    def daemon_silent(self) -> str | None:
        """Why the daemon that runs this container does not answer, or None where it does. A
        silent daemon is checked afresh by the next connection (which then says what to do)."""
        reason = daemon_silent(self.client)
        if reason is not None:
            connect.cache_clear()
        return reason

    def poll(self) -> int | None:
        """None while the container runs. Asked often (the memory watchdog, every 50 ms a
        worker): a local daemon's container init is this host's process, so while it lives the
        daemon is not asked (an inspect is an HTTP round trip, and its answer parsed under the
        GIL, while the other thread times a call by the wall clock)."""
        if self.returncode is None and self._started_at is not None and process_tree.start_time(self.pid) == self._started_at:
            return None
        if self.returncode is None:
            try:
                self.container.reload()
            except Exception:
                self.returncode = -9  # removed behind our back
                return self.returncode
            state = self.container.attrs["State"]
            if state.get("Status") in ("exited", "dead"):
                self.returncode = _as_signal_code(int(state.get("ExitCode", 0)))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        end = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if timeout is not None and end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("docker container", timeout)
            time.sleep(0.05)
        return code

    def kill(self) -> None:
        try:
            # A container paused through the daemon (by an operator, or the daemon-paused
            # fallback) is unpaused through it first: removing it paused left containerd's task,
            # and its shim process, running behind a container the daemon had forgotten.
            self.container.reload()
            if self.container.attrs["State"].get("Paused"):
                self.container.unpause()
        except Exception:
            pass
        try:
            self.container.remove(force=True)  # kills it first
        except Exception:
            pass
        if self.returncode is None:
            self.returncode = -9


def _as_signal_code(exit_code: int) -> int:
    """Docker reports death by signal N as 128+N; the host's messages expect Popen's -N."""
    return -(exit_code - 128) if 128 < exit_code < 160 else exit_code


def _pump_log(sock, log_path: Path) -> None:
    """Docker multiplexes the container's stdout and stderr on the attached socket: both are
    what the program prints, and go to the worker's log."""
    demux = Demultiplexer()
    try:
        with open(log_path, "ab") as log:
            while chunk := sock.recv(1 << 16):
                for _, payload in demux.feed(chunk):
                    log.write(payload)
                    log.flush()
    except (OSError, wire.ProtocolError):
        pass
    finally:
        sock.close()


class Demultiplexer:
    """Docker's attach stream: frames of an 8-byte header (stream id, 3 zero bytes, big-endian
    length) and a payload; stream 1 is stdout, 2 stderr. Chunks may split frames anywhere."""

    HEADER = struct.Struct(">BxxxL")

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        self._buffer += chunk
        frames = []
        while len(self._buffer) >= self.HEADER.size:
            stream, length = self.HEADER.unpack_from(self._buffer)
            if stream not in (0, 1, 2):
                raise wire.ProtocolError(f"not a docker attach stream (stream id {stream})")
            end = self.HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append((stream, bytes(self._buffer[self.HEADER.size:end])))
            del self._buffer[:end]
        return frames

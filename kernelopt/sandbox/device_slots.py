"""The host's side of the device slots: the keeper process and each worker's slots.

On a GPU a call's inputs and outputs never cross host memory inside its window (invariant I4,
docs/referee.md "The call's window"). A trusted keeper process (keeper.py) owns, for
each worker, a device input slot and a device output slot, exported as file descriptors that
the host passes to the worker (worker/device_memory.py). Per call, with the worker frozen, the
keeper copies the packed inputs from the host's input slot into the device input slot; the
worker's thin loop unpacks them there as views, runs the program, copies its outputs into the
device output slot and waits for the device; once the host has frozen it again, the keeper
copies those outputs into its own memory, and the time it has them ends the window. Only then,
outside the window, do they travel to the host's output buffer for the comparisons.

Which calls use the slots (`slots_kind`): CUDA devices under every backend but docker (whose
containers get no descriptors); `KERNELOPT_DEVICE_SLOTS=off` turns them off (outputs then travel
in the answer, as in a container), `=host` runs the same protocol on a CPU with shared memory in
place of device memory (the tests do, on machines without a GPU). A keeper that cannot start
leaves the evaluation on the answer's blobs, and says why.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt.sandbox.worker import commands, device_memory, wire

MODE_VARIABLE = "KERNELOPT_DEVICE_SLOTS"
_SANDBOX_DIR = Path(__file__).resolve().parent
# The keeper runs this checkout's package, as the host does.
_BOOT = "import sys; sys.path.insert(0, {root!r}); from kernelopt.sandbox.keeper import main; main(sys.argv[1:])"
_START_TIMEOUT_S = 120.0
_REQUEST_TIMEOUT_S = 600.0
_GROWTH = 1.25  # a slot remade for larger data gets room beyond it, so it is not remade every call
_names = itertools.count()
log = logging.getLogger(__name__)


class KeeperError(RuntimeError):
    """The keeper failed, died or did not answer (an evaluation then stops: its slots are gone)."""


def slots_kind(device: str, backend_name: str) -> str | None:
    """The kind of device slots an evaluation on `device` under `backend_name` uses, or None."""
    mode = os.environ.get(MODE_VARIABLE, "auto").strip().lower()
    if backend_name == "docker" or mode == "off":
        return None
    if mode == "host":
        return device_memory.HOST
    return device_memory.CUDA if device.startswith("cuda") else None


def start_keeper(device: str, backend_name: str) -> Keeper | None:
    """The keeper for an evaluation's workers, or None where none is used or it cannot start
    (logged: the evaluation then takes outputs from the workers' answers)."""
    kind = slots_kind(device, backend_name)
    if kind is None:
        return None
    try:
        return Keeper(kind, device)
    except KeeperError as exc:
        log.warning("device slots are off for this evaluation: %s", exc)
        return None


class Keeper:
    """The keeper process (keeper.py): one per Evaluator, shared by its workers."""

    def __init__(self, kind: str, device: str):
        self.kind = kind
        self.device_index = int(device.split(":")[1]) if device.startswith("cuda:") else 0
        self._lock = threading.Lock()
        cmd_read, self._cmd_write = os.pipe()
        out_read, out_write = os.pipe()
        self._fds, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-E", "-s", "-c", _BOOT.format(root=str(_SANDBOX_DIR.parents[1])),
                   "--cmd-fd", str(cmd_read), "--out-fd", str(out_write), "--fds-fd", str(theirs.fileno()),
                   "--kind", kind, "--device-index", str(self.device_index)]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, pass_fds=(cmd_read, out_write, theirs.fileno()),
                                        start_new_session=True)
        for fd in (cmd_read, out_write):
            os.close(fd)
        theirs.close()
        self._reader = wire.FrameReader(out_read)
        self._out_read = out_read
        hello = self._read(_START_TIMEOUT_S)
        if not hello.get("ok"):
            self.close()
            raise KeeperError(f"the keeper could not start: {hello.get('error')}")

    def request(self, message: dict, send_fd: int | None = None, receive_fd: bool = False) -> dict:
        """One exchange; `send_fd` goes beside the frame (`share`); with `receive_fd` the keeper's
        answer brings one (`alloc`), returned as the reply's "fd". KeeperError on failure."""
        with self._lock:
            if send_fd is not None:
                socket.send_fds(self._fds, [b"f"], [send_fd])
            try:
                wire.write_frame(self._cmd_write, message)
            except OSError as exc:
                raise KeeperError(f"the keeper is gone ({exc})") from None
            reply = self._read(_REQUEST_TIMEOUT_S)
            if not reply.get("ok"):
                raise KeeperError(f"the keeper's {message.get('cmd')} failed: {reply.get('error')}")
            if receive_fd:
                _, fds, _, _ = socket.recv_fds(self._fds, 1, 1)
                if len(fds) != 1:
                    raise KeeperError(f"the keeper's {message.get('cmd')} sent no descriptor")
                reply["fd"] = fds[0]
        return reply

    def forget(self) -> None:
        """Drop the outputs kept for comparisons (at the start of each timed round)."""
        self.request({"cmd": "forget"})

    def allocate(self, name: str, size: int) -> tuple[int, int]:
        """A new device slot `name` of at least `size` bytes: (its size, a descriptor of it for
        the worker, which the caller closes)."""
        reply = self.request({"cmd": "alloc", "name": name, "size": size}, receive_fd=True)
        return int(reply["size"]), reply["fd"]

    def _read(self, timeout: float) -> dict:
        try:
            reply, _ = self._reader.read(time.monotonic() + timeout)
        except (wire.ChannelClosed, wire.ChannelTimeout, wire.ProtocolError) as exc:
            self.process.kill()
            raise KeeperError(f"the keeper stopped answering ({type(exc).__name__})") from None
        return reply

    def close(self) -> None:
        try:
            wire.write_frame(self._cmd_write, {"cmd": "quit"})
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._cmd_write, self._out_read):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.close()


class HostBuffer:
    """Shared memory the keeper writes a call's outputs into and the host reads them from."""

    def __init__(self, size: int):
        self.fd = os.memfd_create("kernelopt-outputs", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.size = size
        self.map = mmap.mmap(self.fd, size)

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:
            pass
        os.close(self.fd)


@dataclass(frozen=True)
class OnDevice:
    """What the keeper does with a timed call's outputs instead of sending them to the host:
    keep them under `keep`, or compare them with those kept under `compare_with` (the other
    side's, on the same inputs; `kept_side` names it), each side laid out as its answer said
    ([shape, dtype name] per output), judged with `tolerances` (compare.Tolerances.to_json)."""

    keep: str | None = None
    compare_with: str | None = None
    kept_side: str = "reference"
    kept_layouts: tuple = ()
    layouts: tuple = ()  # this call's, filled in from its answer (calls.run_call)
    tolerances: dict = field(default_factory=dict)

    def frame(self) -> dict:
        if self.keep is not None:
            return {"keep": self.keep, "to_host": False}
        return {"compare": {"with": self.compare_with, "kept_side": self.kept_side, "layouts": list(self.layouts),
                            "kept_layouts": list(self.kept_layouts), "tolerances": self.tolerances},
                "to_host": False}


@dataclass(frozen=True)
class Taken:
    """What a take gave: the window's end (the keeper had read its sample of the outputs),
    whether the device input slot still held the inputs (None: not asked), the comparison's
    fields where it compared on the device (compare.Comparison), whether it kept them, and how
    many sampled bytes changed after the window ended."""

    at: float
    inputs_held: bool | None
    comparison: dict | None = None
    kept: bool = False  # the keeper kept them (asked to, it sends them to the host where the device is full)
    late_writes: int = 0  # bytes of the window's-end sample that the outputs' later copy found changed


class WorkerSlots:
    """One worker's device slots as the host keeps track of them: their sizes, the outputs the
    worker last could not fit, and the host's output buffer."""

    def __init__(self, keeper: Keeper, host_inputs_fd: int, host_inputs_size: int):
        self.keeper = keeper
        self.name = f"w{next(_names)}"
        self.inputs_size = self.outputs_size = 0
        self.outputs_wanted = 1  # bytes: the first call learns the real size
        self.host_outputs: HostBuffer | None = None
        keeper.request({"cmd": "share", "name": self._part("host-inputs"), "size": host_inputs_size},
                       send_fd=host_inputs_fd)

    def _part(self, what: str) -> str:
        return f"{self.name}-{what}"

    def stale(self, input_bytes: int) -> bool:
        """Whether the slots must be remade before a call with `input_bytes` of inputs."""
        return self.inputs_size < input_bytes or self.outputs_size < self.outputs_wanted

    def remake(self, input_bytes: int) -> tuple[dict, list[int]]:
        """New slots that fit `input_bytes` of inputs and the outputs last wanted: the `slots`
        message for the worker and the descriptors to send beside it (closed by the caller)."""
        inputs_size, inputs_fd = self.keeper.allocate(self._part("inputs"), int(input_bytes * _GROWTH) + 1)
        outputs_size, outputs_fd = self.keeper.allocate(self._part("outputs"), int(self.outputs_wanted * _GROWTH) + 1)
        if self.host_outputs is not None:
            self.host_outputs.close()
        self.host_outputs = HostBuffer(outputs_size)
        self.keeper.request({"cmd": "share", "name": self._part("host-outputs"), "size": outputs_size},
                            send_fd=self.host_outputs.fd)
        self.inputs_size, self.outputs_size = inputs_size, outputs_size
        return (commands.slots(self.keeper.kind, inputs_size, outputs_size, self.keeper.device_index),
                [inputs_fd, outputs_fd])

    def place(self, at: int, size: int) -> float | None:
        """Copy a call's packed inputs from the host's input slot into the device input slot:
        the keeper's idle probe just after, in ms (None without a GPU)."""
        reply = self.keeper.request({"cmd": "place", "slot": self._part("inputs"),
                                     "source": self._part("host-inputs"), "at": at, "size": size,
                                     "poison": self._part("outputs")})
        probe = reply.get("probe_ms")
        return float(probe) if isinstance(probe, (int, float)) else None

    def take(self, spans: list[tuple[int, int]], check_inputs: tuple[int, int] | None,
             on_device: OnDevice | None = None) -> Taken:
        """Have the keeper copy the outputs at `spans` (offset, bytes) of the device output slot
        out, in that order, into the host's output buffer (or, `on_device`, keep them there or
        compare them there with kept ones, and send the host nothing): the time it had them,
        and (when asked for `check_inputs` = (at, bytes)) whether the device input slot still
        held the inputs."""
        message: dict = {"cmd": "take", "slot": self._part("outputs"), "spans": [list(s) for s in spans],
                         "dest": self._part("host-outputs")}
        if check_inputs is not None:
            message["check_inputs"] = {"slot": self._part("inputs"), "source": self._part("host-inputs"),
                                       "at": check_inputs[0], "size": check_inputs[1]}
        if on_device is not None:
            message.update(on_device.frame())
        reply = self.keeper.request(message)
        held = reply.get("inputs_held")
        return Taken(float(reply["taken_at"]), bool(held) if held is not None else None, reply.get("comparison"),
                     kept=bool(on_device is not None and on_device.keep is not None and reply.get("kept", True)),
                     late_writes=int(reply.get("late_writes", 0)))

    def give(self, key: str, size: int) -> None:
        """Have the keeper copy the `size` bytes of outputs it kept under `key` (this worker's)
        into the host's output buffer after all."""
        self.keeper.request({"cmd": "give", "key": key, "size": size, "dest": self._part("host-outputs")})

    def output_bytes(self, size: int) -> memoryview:
        """The first `size` bytes of the host's output buffer (what the last `take` wrote)."""
        assert self.host_outputs is not None
        return memoryview(self.host_outputs.map)[:size]

    def close(self) -> None:
        names = [self._part(p) for p in ("inputs", "outputs", "host-inputs", "host-outputs")]
        try:
            self.keeper.request({"cmd": "free", "names": names})
        except KeeperError:
            pass
        if self.host_outputs is not None:
            self.host_outputs.close()
            self.host_outputs = None

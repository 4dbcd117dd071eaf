"""The worker: loads one program (the reference or a candidate) and runs it on request.

Started by the host inside the sandbox as
    python -E -s -c <boot> --role R --cmd-fd N --out-fd M
(a pipe each way), or in a container with `--channel-path P` (the host's socket, which the
worker connects to twice: commands, then replies; sandbox/container_channel.py),
with `kernelopt/sandbox` on sys.path, so this package imports as `worker` and needs only the
standard library and torch. A candidate worker hosts one candidate and is then discarded; a
reference worker may be kept warm across the candidates of one problem and is then re-loaded
for each (see `Worker.load`). It computes no verdict and measures nothing: in a candidate's
process every object here can be replaced, so the host clocks each call's window from outside,
freezes the worker's group when the call has answered and reads the outputs itself
(sandbox/calls.py). What runs here is the thin loop: take a call's inputs, run the program once,
say where its outputs are.

Commands (JSON frames, see wire.py; defined once in commands.py): load, inputs (the reference
only), call, labels, profile (after a verdict, advisory: worker/profiling.py), ping, slots (map
the device slots a trusted keeper made: sandbox/device_slots.py), quit; `serve` dispatches them
through a table. Every reply carries "ok"; failures carry "kind" (compile_error,
runtime_error, problem_error, bad_output, protocol) and "error".
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from . import commands, wire
from .cupy_hook import CupyCompiles
from .extensions import ExtensionTracker
from .settings import environment, library_settings, prepare_process, probe_cuda_driver
from .turns import harness_only, pinned_to, harness_turn, program_code, unpin

if TYPE_CHECKING:  # annotations only: the worker imports torch and its own modules when it needs them
    import mmap
    from types import ModuleType

    import torch

    from .guard import Guard

_T = TypeVar("_T")

# The device-wide synchronisation before a CUDA call answers (all streams: the host's clock
# stops at the answer), bound in main() before any program code runs.
_synchronize: Callable[[], None] | None = None
_CUDA_ERROR_MARKERS = ("CUDA error", "cudaError", "device-side assert", "illegal memory access",
                       "CUBLAS_STATUS", "CUDNN_STATUS", "unspecified launch failure")


class WorkerFailure(Exception):
    """A failure to report to the host with its kind."""

    def __init__(self, kind: str, error: str, log: str = ""):
        super().__init__(error)
        self.kind = kind
        self.error = error
        self.log = log
        self.fatal = False  # the error leaves the device unusable (a CUDA error in the candidate's forward)




class Worker:
    def __init__(self, role: str, reader: wire.FrameReader, out_fd: int):
        self.role = role
        self.reader = reader
        self.out_fd = out_fd
        # Set by `load` (None before it: a command that needs them is then a protocol error).
        self.model: Any = None
        self.problem: ModuleType | None = None
        self.device: torch.device | None = None
        self.guard: Guard | None = None
        self.tracker = ExtensionTracker()
        self.cupy = CupyCompiles(self.tracker)  # CuPy's compiles go to the host too (cupy_hook.py)
        self.settings_at_start: dict = {}
        # The last call's inputs and outputs, alive until the next call: the host reads the
        # outputs from this process's memory after the call has answered.
        self.last_call: tuple = ()
        self.loads = 0
        self.inputs_map: mmap.mmap | None = None  # the host's input slot (shared memory), when it gave one
        self.descriptors: socket.socket | None = None  # where the host passes the device slots' descriptors
        self.device_slots: tuple = ()  # (input slot, output slot): device_memory.Mapping, once mapped
        self.outbox_fd: int | None = None  # the host's shared memory for input sets (make_inputs)
        self.load_message: dict = {}  # the last `load`, for the profiling pass's child process
        import torch

        self._initial_seed = torch.initial_seed()  # the generators' state in a fresh process

    # -- commands ---------------------------------------------------------------------------

    def load(self, msg: dict) -> dict:
        """Import the problem (and the candidate) and instantiate the model.

        A reference worker may be loaded again for the next candidate: the problem module is
        executed afresh, torch's generators are reset to a fresh process's state and the model
        is re-instantiated from the init seed, so a stateful reference starts from the same
        state as the fresh candidate it is compared with. A candidate worker loads once."""
        import torch

        if self.loads and self.role == "candidate":
            raise WorkerFailure("protocol", "a candidate worker hosts one candidate")
        self.loads += 1
        self.model, self.last_call, self.load_message = None, (), msg
        torch.manual_seed(self._initial_seed)
        self.device = torch.device(msg["device"])
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.cuda.init()
        else:
            probe_cuda_driver()
        self.settings_at_start = library_settings()
        # Both roles install the tracker: its imports shape the process (modules, heap), and
        # two workers set up differently time the same code differently (an exact copy of a
        # memory-bound kernel measured 0.6x-0.75x when only the candidate's had it).
        if not self.tracker.installed:
            self.tracker.install()
            self.cupy.install()
        if self.role == "candidate" and msg.get("host_builds"):
            self.tracker.request_build = self.cupy.request = self._request_build
        prepare_process()
        from .guard import Guard

        self.guard = Guard()  # after the harness's own set-up, before any program code runs
        with program_code():
            self.model, init_digest = self._load_program(msg)
        self.cupy.request = None  # a kernel made later (in forward) compiles in process, in memory
        return {"ok": True, "init_digest": init_digest, "environment": environment(self.device),
                "violations": self.guard.violations(), **self._labels()}

    def _load_program(self, msg: dict):
        """Import the problem (and the candidate), instantiate the model on the device: the
        model and the digest of the init inputs."""
        from . import measure

        self.problem = problem = self._import_problem(msg["problem_path"])
        try:
            measure.set_seed(msg["init_seed"])
            init_inputs = problem.get_init_inputs()
        except BaseException as exc:
            raise WorkerFailure("problem_error", "get_init_inputs() raised " + _describe(exc)) from None
        init_digest = measure.digest(init_inputs)

        if self.role == "reference":
            model_class = getattr(problem, "Model")
        else:
            model_class = self._import_candidate(msg["candidate_path"])
        try:
            measure.set_seed(msg["init_seed"])
            model = model_class(*init_inputs)
            if hasattr(model, "to"):
                model = model.to(self.device)
        except BaseException as exc:
            kind = "problem_error" if self.role == "reference" else "runtime_error"
            raise WorkerFailure(kind, f"{model_class.__name__}(*init_inputs) raised " + _describe(exc)) from None
        return model, init_digest

    def make_inputs(self, msg: dict) -> tuple[dict, list[bytes]]:
        """The reference's input sets for the host's seeds, packed (see transfer.py): the host
        hands them to both workers, one call at a time. Only the reference worker makes
        inputs: no step of input generation runs where a candidate's code could reach it. Sets
        that fit go into the host's outbox where the message names one (shared memory of the
        host's: no pipe to cross), one after another; the rest come as the reply's blobs."""
        from . import measure, transfer

        if self.role != "reference":
            raise WorkerFailure("protocol", "only the reference worker makes inputs")
        problem = _after_load(self.problem)
        outbox = self._outbox(msg.get("outbox"))
        sets: list[dict] = []
        blobs: list[bytes] = []
        at = 0
        try:
            for seed in msg["seeds"]:
                try:
                    measure.set_seed(seed)
                    inputs = problem.get_inputs()
                    with harness_only():
                        spec, placed, size = transfer.plan(inputs)
                        start = at + (-at) % transfer.ALIGN
                        if outbox is not None and start + size <= len(outbox):
                            transfer.fill(placed, outbox, start)
                            sets.append({"seed": seed, "spec": spec, "at": start, "nbytes": size})
                            at = start + size
                            continue
                        packed = bytearray(size)  # bytes-like, as transfer.pack's
                        transfer.fill(placed, packed, 0)
                except transfer.TransferError as exc:
                    raise WorkerFailure("problem_error", str(exc)) from None
                except BaseException as exc:
                    raise WorkerFailure("problem_error", "get_inputs() raised " + _describe(exc)) from None
                sets.append({"seed": seed, "spec": spec})
                blobs.append(packed)  # type: ignore[arg-type]
        finally:
            if outbox is not None:  # mapped for each request only: its pages are not this worker's memory between
                try:
                    outbox.close()
                except BufferError:  # a view of it still alive: unmapped when that goes
                    pass
        return {"ok": True, "sets": sets}, blobs

    def _outbox(self, request) -> mmap.mmap | None:
        """The host's outbox mapped for one request: {"size": bytes, "new": whether its descriptor
        came beside this frame (it replaces the one kept)}; None without one."""
        import mmap

        if not isinstance(request, dict) or not isinstance(request.get("size"), int) or request["size"] <= 0:
            return None
        if request.get("new"):
            fd, = self._descriptors(1, "a new outbox")
            if self.outbox_fd is not None:
                os.close(self.outbox_fd)
            self.outbox_fd = fd
        if self.outbox_fd is None or os.fstat(self.outbox_fd).st_size < request["size"]:
            raise WorkerFailure("protocol", "an outbox this worker was not given")
        return mmap.mmap(self.outbox_fd, request["size"])

    def _descriptors(self, count: int, what: str) -> list[int]:
        """The `count` descriptors the host sent beside this frame, for `what`."""
        if self.descriptors is None:
            raise WorkerFailure("protocol", "this worker has no descriptor channel")
        _, fds, _, _ = socket.recv_fds(self.descriptors, 1, count)
        if len(fds) != count:
            for fd in fds:
                os.close(fd)
            raise WorkerFailure("protocol", f"{len(fds)} descriptor(s) came with {what}, not {count}")
        return fds

    def call(self, msg: dict, blobs: list[bytes]) -> tuple[dict, list]:
        """One call's window, the thin loop's only step: unpack the inputs the host placed
        (contiguous CPU tensors as views of the input slot, the rest as fresh copies on the
        device), run the program once, wait for the device, and say where the outputs are
        (measure.describe_outputs). The host's clocks run from its thaw of this worker's group
        to the answer (and the freeze after it), so everything here, the program's and the
        harness's alike, is on them, the same code on both sides; nothing this reports is
        believed (sandbox/calls.py)."""
        from . import measure

        inputs = self._receive_inputs(msg, blobs)
        self.last_call = ()
        with pinned_to(msg.get("pin_cpu")):
            try:
                with program_code():
                    output = _after_load(self.model)(*inputs)
                    if _synchronize is not None and _after_load(self.device).type == "cuda":
                        _synchronize()
            except BaseException as exc:
                raise self._run_failure(exc) from None
        transport = str(msg.get("transport"))
        if transport == commands.MEMORY:
            with harness_only():
                output = measure.laid_out(output)
        self.last_call = (inputs, output)
        try:
            with harness_only():
                slot = self.device_slots[1] if transport == commands.DEVICE and self.device_slots else None
                described, values = measure.describe_outputs(output, inputs, transport, slot)
                if "slot_spans" in described and _synchronize is not None and _after_load(self.device).type == "cuda":
                    _synchronize()  # the copies into the slot are done before the answer
        except measure.OutputError as exc:
            raise WorkerFailure("bad_output", str(exc)) from None
        return {"ok": True, "called": msg.get("seed"), **described}, values

    def _receive_inputs(self, call: dict, blobs: list[bytes]):
        """One call's inputs on the device: contiguous CPU tensors as views of the slot (or of
        the frame's bytes), the rest as fresh copies (transfer.unpack)."""
        from . import transfer

        size, at = call.get("slot"), call.get("at", 0)
        buffer: bytearray | memoryview | torch.Tensor
        device_slot = self.device_slots[0] if call.get("transport") == commands.DEVICE and self.device_slots else None
        if device_slot is not None and isinstance(size, int) and isinstance(at, int) and \
                0 <= at and 0 <= size and at + size <= device_slot.size:
            buffer = device_slot.tensor().narrow(0, at, size)  # the keeper placed them there
        elif size is None and len(blobs) == 1:
            # The frame's own bytes (the reader reads a blob into a bytearray): copied again here,
            # inside the window, they would be a step whose work grows with the inputs and that a
            # program could skip by replacing this one.
            buffer = blobs[0] if isinstance(blobs[0], bytearray) else bytearray(blobs[0])
        elif (isinstance(size, int) and isinstance(at, int) and self.inputs_map is not None
              and 0 <= at and 0 <= size and at + size <= len(self.inputs_map)):
            buffer = memoryview(self.inputs_map)[at:at + size]
        else:
            raise WorkerFailure("protocol", "a call frame without its inputs")
        try:
            with harness_only():
                return transfer.unpack(call.get("spec"), buffer, _after_load(self.device))
        except transfer.TransferError as exc:
            raise WorkerFailure("protocol", str(exc)) from None

    def slots(self, msg: dict) -> dict:
        """Map the device slots whose descriptors the host sent beside this frame (input, then
        output), in place of any mapped before."""
        from . import device_memory

        fds = self._descriptors(2, "`slots`")
        index = msg.get("device_index", 0)
        if not isinstance(index, int):
            raise WorkerFailure("protocol", "a device index that is not a number")
        self.last_call = ()  # views of the old slots go before their memory is unmapped
        for old in self.device_slots:
            old.close()
        self.device_slots = ()
        try:
            with harness_only():
                self.device_slots = tuple(device_memory.open_slot(str(msg.get("kind")), fd, int(msg[key]), index)
                                          for fd, key in zip(fds, ("inputs", "outputs")))
        except (device_memory.DeviceMemoryError, KeyError, TypeError, ValueError, OSError) as exc:
            raise WorkerFailure("protocol", f"the device slots could not be mapped: {exc}") from None
        return {"ok": True}

    def labels(self) -> dict:
        """What the program built and changed so far, and the guard's findings: labels for the
        verdict's optimization kinds, asked between phases (advisory: from the candidate's own
        process)."""
        reply = {"ok": True, **self._labels()}
        reply["violations"] = _after_load(self.guard).violations() if self.role == "candidate" else []
        return reply

    def _request_build(self, request: dict) -> dict:
        """Mid-`load` exchange: the host builds (or finds in its cache) and answers."""
        wire.write_frame(self.out_fd, {"ok": True, "build": request})
        reply, _ = self.reader.read()
        if reply.get("cmd") != commands.BUILT:
            raise WorkerFailure("protocol", "expected the host's build reply")
        return reply

    def profile(self, msg: dict, blobs: list[bytes]) -> dict:
        """The advisory profiling pass after a verdict (worker/profiling.py) on the inputs the
        call frame brings: neither timed nor judged, its failures are notes on the host."""
        from . import profiling

        inputs = self._receive_inputs(msg, blobs)
        ncu = None
        if msg.get("ncu"):  # what ncu's child process needs to load the same model
            loaded = self.load_message
            scratch = os.path.dirname(str(loaded.get("problem_path")))
            ncu = {"device": str(self.device), "init_seed": loaded.get("init_seed"),
                   "problem_path": loaded.get("problem_path"), "candidate_path": loaded.get("candidate_path"),
                   "delivered": self.tracker.delivered, "workdir": os.path.join(scratch, "tmp", "ncu")}
        with program_code():
            return profiling.profile_model(self.model, inputs, self.device, budget_s=float(msg.get("budget_s", 1.0)),
                                           count_work=bool(msg.get("count_work")), ncu=ncu)

    # -- helpers ----------------------------------------------------------------------------

    def _import_problem(self, path: str) -> ModuleType:
        try:
            return _exec_module("kernelopt_problem", path)
        except BaseException as exc:
            raise WorkerFailure("problem_error", "importing the problem raised " + _describe(exc)) from None

    def _import_candidate(self, path: str):
        try:
            module = _exec_module("kernelopt_candidate", path)
        except SyntaxError as exc:
            raise WorkerFailure("compile_error", f"syntax error at line {exc.lineno}: {exc.msg}") from None
        except BaseException as exc:
            failed_build = any(not b["ok"] for b in self.tracker.builds)
            kind = "compile_error" if failed_build else "runtime_error"
            raise WorkerFailure(kind, "importing the candidate raised " + _describe(exc),
                                log=self.tracker.build_log) from None
        model_class = getattr(module, "ModelNew", None)
        if not isinstance(model_class, type):
            raise WorkerFailure("compile_error", "the candidate defines no class ModelNew")
        return model_class

    def _run_failure(self, exc: BaseException) -> WorkerFailure:
        text = _describe(exc)
        if self.role == "reference":
            return WorkerFailure("problem_error", "the reference's forward raised " + text)
        failure = WorkerFailure("runtime_error", "forward raised " + text)
        failure.fatal = any(marker in text for marker in _CUDA_ERROR_MARKERS)
        return failure

    def safe_labels(self) -> dict:
        try:
            return self._labels()
        except Exception:  # noqa: BLE001 - labels are best effort on a failure path
            return {}

    def _labels(self) -> dict:
        settings = library_settings()
        changed = sorted(k for k, v in settings.items() if self.settings_at_start.get(k) != v)
        import torch

        return {"builds": self.tracker.builds, "extension_calls_total": self.tracker.calls,
                "changed_settings": changed, "torch_threads": torch.get_num_threads()}


def _after_load(value: _T | None) -> _T:
    """`value`, which `load` sets: a command that needs it before any load is a protocol error."""
    if value is None:
        raise WorkerFailure("protocol", "the program is not loaded: send load first")
    return value


def _exec_module(name: str, path: str) -> ModuleType:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))


def _describe(exc: BaseException) -> str:
    """The exception in one line, then the last frames of its traceback that are not the
    harness's own (the program's, and the libraries it called): what its author can act on."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(f.filename).startswith(_HARNESS_DIR + os.sep)]
    tail = "".join(traceback.format_list(frames[-5:]) + traceback.format_exception_only(type(exc), exc))
    return f"{type(exc).__name__}: {exc}".strip()[:2000] + "\n" + tail[-3000:]


# The commands a worker answers (worker/commands.py), each (worker, message, frame blobs) -> (reply, blobs).
_HANDLERS = {
    commands.LOAD: lambda worker, msg, blobs: (worker.load(msg), []),
    commands.INPUTS: lambda worker, msg, blobs: worker.make_inputs(msg),
    commands.CALL: lambda worker, msg, blobs: worker.call(msg, blobs),
    commands.LABELS: lambda worker, msg, blobs: (worker.labels(), []),
    commands.PROFILE: lambda worker, msg, blobs: (worker.profile(msg, blobs), []),
    # the host checks that a warm worker is in step with it
    commands.PING: lambda worker, msg, blobs: ({"ok": True, "pong": msg.get("token")}, []),
    commands.SLOTS: lambda worker, msg, blobs: (worker.slots(msg), []),
}


def serve(role: str, cmd_fd: int, out_fd: int, inputs_fd: int | None = None, fds_fd: int | None = None,
          inputs_path: str | None = None) -> None:
    harness_turn()
    reader = wire.FrameReader(cmd_fd)
    worker = Worker(role, reader, out_fd)
    if fds_fd is not None:
        worker.descriptors = socket.socket(fileno=fds_fd)
    if inputs_path is not None:
        worker.inputs_map = _map_read_only(inputs_path)
    elif inputs_fd is not None:
        import mmap

        worker.inputs_map = mmap.mmap(inputs_fd, os.fstat(inputs_fd).st_size)
    if worker.inputs_map is not None:
        import mmap

        # Map the placement window's pages now (the host wrote them): a call never faults them in.
        window = min(len(worker.inputs_map), 32 << 20)
        sum(worker.inputs_map[offset] for offset in range(0, window, mmap.PAGESIZE))
    hello: dict[str, object] = {"ok": True, "hello": wire.PROTOCOL_VERSION, "pid": os.getpid()}
    if role == "candidate":  # before any program code: nothing it makes may wake while it is frozen
        from . import syscall_filter

        hello["wakeup_filter"] = syscall_filter.install()  # "": it holds; else why not
    wire.write_frame(out_fd, hello)
    while True:
        try:
            msg, frame_blobs = reader.read()
        except wire.ChannelClosed:
            return
        command = msg.get("cmd")
        if command == commands.QUIT:
            return
        if command != commands.CALL:
            unpin()  # a timed call left this thread on its core: the other steps run unpinned
        blobs: list[bytes] = []
        try:
            handler = _HANDLERS.get(command) if isinstance(command, str) else None
            if handler is None:
                reply = commands.failure(commands.PROTOCOL, f"unknown command {command!r}")
            else:
                reply, blobs = handler(worker, msg, frame_blobs)
        except WorkerFailure as failure:
            reply = {"ok": False, "kind": failure.kind, "error": failure.error, "log": failure.log,
                     "fatal": getattr(failure, "fatal", False), **worker.safe_labels()}
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from candidate code too
            kind = "problem_error" if role == "reference" else "runtime_error"
            reply = {"ok": False, "kind": kind, "error": _describe(exc), **worker.safe_labels()}
        wire.write_frame(out_fd, reply, blobs)
        sys.stdout.flush()


def _map_read_only(path: str) -> mmap.mmap | None:
    """A container's input slot (sandbox/input_files.py): the host's tmpfs file, mounted
    read-only, mapped shared and read-only, so an input written in place faults in the program
    that writes it. None where it cannot be mapped (the host then sends the inputs in frames)."""
    import mmap
    import warnings

    import torch

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        mapped = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    with warnings.catch_warnings():  # torch warns once per process of a read-only buffer: here, not in a call
        warnings.simplefilter("ignore")
        torch.frombuffer(memoryview(mapped)[:1], dtype=torch.uint8)
    return mapped


def _connect_channel(path: str) -> tuple[int, int]:
    """A container's channel: connect to the host's socket twice, commands first, then
    replies (kernelopt/sandbox/container_channel.py). Python's sockets are not inherited by
    anything the worker runs."""
    ends = []
    for _ in range(2):
        end = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        end.connect(path)
        ends.append(end.detach())
    return ends[0], ends[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kernelopt-worker")
    parser.add_argument("--role", choices=["reference", "candidate"], required=True)
    parser.add_argument("--cmd-fd", type=int, default=None)
    parser.add_argument("--out-fd", type=int, default=None)
    parser.add_argument("--channel-path", default=None, help="a container's: the host's socket to connect to")
    parser.add_argument("--inputs-fd", type=int, default=None)
    parser.add_argument("--fds-fd", type=int, default=None)
    parser.add_argument("--inputs-path", default=None)
    args = parser.parse_args(argv)
    if args.channel_path is not None:
        cmd_fd, out_fd = _connect_channel(args.channel_path)
    elif args.cmd_fd is not None and args.out_fd is not None:
        cmd_fd, out_fd = args.cmd_fd, args.out_fd
    else:
        parser.error("give --channel-path, or --cmd-fd and --out-fd")
    import torch  # (import before anything of the candidate's; binds torch's state)

    from . import measure  # noqa: F401  (binds the functions it uses before any program code runs)

    global _synchronize
    _synchronize = torch.cuda.synchronize

    serve(args.role, cmd_fd, out_fd, args.inputs_fd, args.fds_fd, args.inputs_path)
    os._exit(0)  # skip interpreter teardown: a candidate's atexit hooks get no say

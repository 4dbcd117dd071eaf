"""The worker: loads one program (the reference or a candidate) and runs it on request.

Started by the host inside the sandbox as
    python -E -s -c <boot> --role R --cmd-fd N --out-fd M
with `kernelopt/sandbox` on sys.path, so this package imports as `worker` and needs only the
standard library and torch. A candidate worker hosts one candidate and is then discarded; a
reference worker may be kept warm across the candidates of one problem and is then re-loaded
for each (see `Worker.load`). It computes no verdict: it reports raw facts (times,
fingerprints, digests, outputs), and the host, which the candidate cannot reach, decides.

Commands (JSON frames, see wire.py; defined once in commands.py): load, inputs (the reference
only), run (followed by its call frames and report), fetch, profile (after a verdict, advisory:
worker/profiling.py), ping, quit; `serve` dispatches them through a table. Every reply carries "ok";
failures carry "kind" (compile_error, runtime_error, problem_error, bad_output, interception,
protocol) and "error".
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from . import commands, wire
from .cupy_hook import CupyCompiles
from .extensions import ExtensionTracker
from .settings import environment, library_settings, prepare_process, probe_cuda_driver
from .turns import harness_only, pinned_to, harness_turn, interceptors, program_code

if TYPE_CHECKING:  # annotations only: the worker imports torch and its own modules when it needs them
    import mmap
    from types import ModuleType

    import torch

    from .guard import Guard
    from .measure import Fingerprinter, Timer

_T = TypeVar("_T")

_perf_ns = time.perf_counter_ns
# measure.Timer.call, bound in main() before the first program code runs (and before any command).
_timer_call: Callable[[Timer, Any, Any], tuple[object, float, float]] = None  # type: ignore[assignment]


def _marker(write, clock):
    """A call's start or end mark to the host, with the monotonic clock's reading as it leaves
    (docs/referee.md, "The host's clock decides"): the start's is in the pipe before any of the
    program's code runs, so no frame local or global holds it."""
    frame = b'{"ok":true,"mark":"%s","t":%d,"blobs":[]}\n'

    def mark(out_fd: int, which: bytes) -> None:
        write(out_fd, frame % (which, clock()))

    return mark


_mark = _marker(os.write, time.perf_counter_ns)
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
        self.timer: Timer | None = None
        self.guard: Guard | None = None
        self.fingerprint: Fingerprinter | None = None
        self.tracker = ExtensionTracker()
        self.cupy = CupyCompiles(self.tracker)  # CuPy's compiles go to the host too (cupy_hook.py)
        self.settings_at_start: dict = {}
        self.retained: list[tuple] = []  # the last round's kept copies as bytes (measure.copy_outputs), for `fetch`
        self.loads = 0
        self.inputs_map: mmap.mmap | None = None  # the host's input slot (shared memory), when it gave one
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
        from . import measure

        if self.loads and self.role == "candidate":
            raise WorkerFailure("protocol", "a candidate worker hosts one candidate")
        self.loads += 1
        self.model, self.retained, self.load_message = None, [], msg
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
        self._check_interception("after the candidate loaded")
        self.timer = measure.Timer(self.device)
        self.fingerprint = measure.Fingerprinter(msg["fingerprint_seed"])
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
        inputs: no step of input generation runs where a candidate's code could reach it."""
        from . import measure, transfer

        if self.role != "reference":
            raise WorkerFailure("protocol", "only the reference worker makes inputs")
        problem = _after_load(self.problem)
        sets, blobs = [], []
        for seed in msg["seeds"]:
            try:
                measure.set_seed(seed)
                inputs = problem.get_inputs()
                with harness_only():
                    spec, packed = transfer.pack(inputs)
                    digest = measure.digest(inputs)
            except transfer.TransferError as exc:
                raise WorkerFailure("problem_error", str(exc)) from None
            except BaseException as exc:
                raise WorkerFailure("problem_error", "get_inputs() raised " + _describe(exc)) from None
            sets.append({"seed": seed, "spec": spec, "digest": digest})
            blobs.append(packed)
        return {"ok": True, "sets": sets}, blobs

    def run(self, msg: dict) -> tuple[dict, list[bytes]]:
        """Run the model once per `call` frame that follows, answering each with its record
        (times, output fingerprints and shapes, input digests); at `report`, the run's labels
        and the guard's findings.

        The worker says ready, then takes `count` calls one at a time: each frame brings one
        input set (in the input slot, or in the frame), which is unpacked (contiguous CPU
        tensors as views of it, the rest as fresh copies on the device), run, and its output
        copied and fingerprinted outside the timed region; the worker answers each call with
        its record (and the output when `return_outputs`) before the host hands over the next
        inputs. So the host's clock brackets every call, no call's inputs exist here before
        it, and everything the verdict takes from a call has left the worker before the
        program's code could run again: a program cannot do a call's work after its answer
        (in the worker's wait or its report) and have the fingerprints see it.
        """
        from . import measure

        count = msg.get("count")
        if not isinstance(count, int) or count < 0:
            return {"ok": False, "kind": "protocol", "error": "run needs a call count"}, []
        hash_inputs = bool(msg.get("hash_inputs"))
        retain = bool(msg.get("retain"))
        calls_before = self.tracker.calls
        kept_all = []
        fingerprints = msg.get("fingerprints", True)
        wire.write_frame(self.out_fd, {"ok": True, "ready": True})
        with pinned_to(msg.get("pin_cpu")):
            for index in range(count):
                call, blobs = self.reader.read()
                if call.get("cmd") != commands.CALL:
                    return {"ok": False, "kind": "protocol", "error": "expected call"}, []
                inputs = self._receive_inputs(call, blobs)
                record = {"seed": call.get("seed")}
                if hash_inputs:
                    with harness_only():
                        record["inputs_before"] = measure.digest(inputs)
                event_ms, host_ms, kept, taken, aliased, shape = self._call(inputs)
                with harness_only():
                    record.update(ms=event_ms, host_ms=host_ms, aliases_input=aliased, structure=shape,
                                  meta=[[list(t.shape), str(t.dtype), str(t.device)] for t in kept],
                                  input_bytes=sum(t.numel() * t.element_size() for t in measure.tensors_in(inputs)))
                    if hash_inputs:
                        record["inputs_after"] = measure.digest(inputs)
                    if fingerprints:
                        record["fingerprints"] = [self._fingerprint(t) for t in kept]
                    blob = [measure.serialize(kept)] if msg.get("return_outputs") else []
                if retain:  # taken inside the call's bracket: what `fetch` sends is what was fingerprinted
                    kept_all.append(taken)
                del inputs, kept, taken
                wire.write_frame(self.out_fd, {"ok": True, "called": index, "record": record}, blob)
        report, _ = self.reader.read()
        if report.get("cmd") != commands.REPORT:
            return {"ok": False, "kind": "protocol", "error": "expected report"}, []
        self.retained = kept_all if retain else []
        reply = {"ok": True, "extension_calls": self.tracker.calls - calls_before, **self._labels()}
        reply["violations"] = _after_load(self.guard).violations() if self.role == "candidate" else []
        return reply, []

    def _fingerprint(self, t) -> dict:
        from . import measure

        try:
            return _after_load(self.fingerprint)(t)
        except measure.HarnessObjectError as exc:
            raise WorkerFailure(commands.HARNESS_OBJECT, str(exc)) from None

    def _receive_inputs(self, call: dict, blobs: list[bytes]):
        """One call's inputs on the device: contiguous CPU tensors as views of the slot (or of
        the frame's bytes), the rest as fresh copies (transfer.unpack)."""
        from . import transfer

        size, at = call.get("slot"), call.get("at", 0)
        buffer: bytearray | memoryview
        if size is None and len(blobs) == 1:
            buffer = bytearray(blobs[0])
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

    def _call(self, inputs) -> tuple[float, float, list, tuple, bool, str]:
        """One timed forward: (event ms, host ms, copied outputs, their snapshot as bytes,
        whether outputs alias inputs, the output's structure). Before the harness touches anything after the call, it checks
        that nothing intercepts tensor operations (modes, profile and trace functions), that
        the outputs are plain, dense tensors, and that its own list of the call's inputs still
        holds only plain tensors and scalars (the program can reach that list through frames or
        gc): no object of the program's runs its code in the harness's copy, hashes or
        fingerprints. The copies are fresh, made with torch-function and dispatch handling off."""
        from . import measure, transfer

        timer = _after_load(self.timer)
        self._check_harness_objects(timer.harness_tensors(), "the timer's flush buffer")
        self._check_interception("before its call")
        out_fd = self.out_fd
        # After each mark the worker waits until the host has read its clocks (this process's
        # CPU clock among them): between the marks is the call's time on the host's clocks,
        # whatever the timer below reports (which the program can reach).
        _mark(out_fd, b"start")
        self._await_host()
        try:
            # Through the class, bound at import: a method shadowed on the instance is never called.
            with program_code():
                output, event_ms, host_ms = _timer_call(timer, self.model, inputs)
            _mark(out_fd, b"end")
        except BaseException as exc:
            raise self._run_failure(exc) from None
        self._await_host()
        self._check_interception("after its call returned")
        self._check_harness_objects(inputs, "the harness's list of the call's inputs")
        with harness_only():
            shape = transfer.structure(output)
            try:
                outputs = measure.flatten_outputs(output)
            except measure.OutputError as exc:
                raise WorkerFailure("bad_output", str(exc)) from None
            aliased = measure.aliases(outputs, inputs)
            kept, taken = measure.copy_outputs(outputs)
            timer.drain()
        return event_ms, host_ms, kept, taken, aliased, shape

    def _await_host(self) -> None:
        answer, _ = self.reader.read()
        if answer.get("cmd") != commands.MARKED:
            raise WorkerFailure("protocol", "expected the host's word that it read the call's mark")

    def _check_harness_objects(self, obj, what: str) -> None:
        from . import measure

        try:
            measure.check_plain(obj, what)
        except measure.HarnessObjectError as exc:
            raise WorkerFailure(commands.HARNESS_OBJECT, str(exc)) from None

    def _check_interception(self, when: str) -> None:
        """Anything that would run candidate code inside the harness's own steps (tensor
        operations, function calls) must be gone whenever the harness works: a torch-function
        or dispatch mode left on its stack, a profile or trace function."""
        if self.role != "candidate":
            return
        found = interceptors()
        if found:
            raise WorkerFailure("interception", f"{', '.join(found)} active {when}: the candidate may not "
                                                "intercept the harness's operations")

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

    def fetch(self, msg: dict) -> tuple[dict, list[bytes]]:
        """Full outputs of one call of the last round; the host picks which after the round."""
        from . import measure

        index = msg.get("index")
        if type(self.retained) is not list:
            raise WorkerFailure(commands.HARNESS_OBJECT, "the harness's list of kept copies was replaced")
        if not isinstance(index, int) or not 0 <= index < len(self.retained):
            return {"ok": False, "kind": "protocol", "error": f"no retained call {index!r}"}, []
        taken, self.retained = self.retained[index], []
        try:
            with harness_only():
                blob = measure.serialize_snapshot(taken)
        except measure.HarnessObjectError as exc:
            raise WorkerFailure(commands.HARNESS_OBJECT, str(exc)) from None
        return {"ok": True}, [blob]

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


def _describe(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(lines[-6:])
    return f"{type(exc).__name__}: {exc}".strip()[:2000] + "\n" + tail[-3000:]


# The commands a worker answers (worker/commands.py), each (worker, message, frame blobs) -> (reply, blobs).
_HANDLERS = {
    commands.LOAD: lambda worker, msg, blobs: (worker.load(msg), []),
    commands.INPUTS: lambda worker, msg, blobs: worker.make_inputs(msg),
    commands.RUN: lambda worker, msg, blobs: worker.run(msg),
    commands.FETCH: lambda worker, msg, blobs: worker.fetch(msg),
    commands.PROFILE: lambda worker, msg, blobs: (worker.profile(msg, blobs), []),
    # the host checks that a warm worker is in step with it
    commands.PING: lambda worker, msg, blobs: ({"ok": True, "pong": msg.get("token")}, []),
}


def serve(role: str, cmd_fd: int, out_fd: int, inputs_fd: int | None = None) -> None:
    harness_turn()
    reader = wire.FrameReader(cmd_fd)
    worker = Worker(role, reader, out_fd)
    if inputs_fd is not None:
        import mmap

        worker.inputs_map = mmap.mmap(inputs_fd, os.fstat(inputs_fd).st_size)
        # Map the placement window's pages now (the host wrote them): a call never faults them in.
        window = min(len(worker.inputs_map), 32 << 20)
        sum(worker.inputs_map[offset] for offset in range(0, window, mmap.PAGESIZE))
    wire.write_frame(out_fd, {"ok": True, "hello": wire.PROTOCOL_VERSION, "pid": os.getpid()})
    while True:
        try:
            msg, frame_blobs = reader.read()
        except wire.ChannelClosed:
            return
        command = msg.get("cmd")
        if command == commands.QUIT:
            return
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


def _channel_off_standard_streams(cmd_fd: int, out_fd: int) -> tuple[int, int]:
    """In a container the channel is the worker's stdin/stdout (all docker attaches). Move it
    to fresh descriptors, then give stdin /dev/null and make stdout the log (stderr): nothing
    the program reads or prints can reach the channel."""
    if cmd_fd > 2 and out_fd > 2:
        return cmd_fd, out_fd
    cmd_fd, out_fd = os.dup(cmd_fd), os.dup(out_fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return cmd_fd, out_fd


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kernelopt-worker")
    parser.add_argument("--role", choices=["reference", "candidate"], required=True)
    parser.add_argument("--cmd-fd", type=int, required=True)
    parser.add_argument("--out-fd", type=int, required=True)
    parser.add_argument("--inputs-fd", type=int, default=None)
    args = parser.parse_args(argv)
    cmd_fd, out_fd = _channel_off_standard_streams(args.cmd_fd, args.out_fd)
    import torch  # noqa: F401  (import before anything of the candidate's; binds torch's state)

    from . import measure  # (binds the clock and synchronisation functions)

    global _timer_call
    _timer_call = measure.Timer.call

    serve(args.role, cmd_fd, out_fd, args.inputs_fd)
    os._exit(0)  # skip interpreter teardown: a candidate's atexit hooks get no say

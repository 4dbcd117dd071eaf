"""Watches the worker's own runtime for tampering by the candidate it hosts.

The worker binds the functions it times and checks with *before* importing the candidate, so
reassigning `time.perf_counter` or `torch.cuda.synchronize` cannot change what the worker
measures. Such a reassignment is still a clear sign of an attempt, so the guard snapshots the
identity of every function and class in the namespaces the harness relies on and reports any
that changed. It also reports Python threads and child processes the candidate left running
(work done there would escape the timed region). All of this runs in the candidate's process
and can be blinded by a determined candidate; the host's own census of the sandbox (threads,
processes) and its clock do not depend on it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

# Namespaces whose callables the harness (or the reference semantics) depends on.
_WATCHED_MODULES = (
    "builtins", "sys", "time", "gc", "os", "threading", "_thread", "ctypes",
    "torch", "torch._C", "torch.cuda", "torch.nn.functional", "torch.testing",
    "torch.autograd", "torch.random", "random",
)
_WATCHED_CLASSES = (
    ("torch", "Tensor"), ("torch.nn", "Module"), ("torch.cuda", "Event"), ("torch.cuda", "Stream"),
)


def _namespaces() -> dict[str, Mapping[str, Any]]:
    spaces: dict[str, Mapping[str, Any]] = {}
    for name in _WATCHED_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            spaces[name] = vars(module)
    for module_name, class_name in _WATCHED_CLASSES:
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None) if module is not None else None
        if isinstance(cls, type):
            spaces[f"{module_name}.{class_name}"] = vars(cls)
    for name, module in list(sys.modules.items()):
        # The worker's own modules: their globals hold the bound clocks and checks.
        if name == "worker" or name.startswith("worker."):
            spaces[name] = vars(module)
    return spaces


# The aten operators the harness applies to inputs and outputs (copies, digests, fingerprints):
# a kernel registered over one of them (torch.library) would run candidate code in the harness's
# steps, whatever the torch-function and dispatch mode stacks say.
_HARNESS_OPS = (
    "aten::copy_", "aten::clone", "aten::detach", "aten::_to_copy", "aten::contiguous", "aten::view",
    "aten::reshape", "aten::_reshape_alias", "aten::sum.dim_IntList", "aten::sum", "aten::abs",
    "aten::linalg_vector_norm", "aten::dot", "aten::cat", "aten::stack", "aten::constant_pad_nd",
    "aten::nan_to_num", "aten::isnan", "aten::isposinf", "aten::isneginf", "aten::mul.Tensor",
    "aten::empty.memory_format", "aten::empty_strided", "aten::view_as_real", "aten::_local_scalar_dense",
    "aten::resolve_conj", "aten::resolve_neg", "aten::zero_", "aten::fill_.Scalar", "aten::as_strided",
)
# Dispatch keys whose kernels do the work (meta, functionalization and tracing keys that torch
# registers lazily, e.g. for torch.compile, are not the harness's concern).
_KERNEL_KEYS = ("CPU:", "CUDA:", "Autograd", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                "BackendSelect:", "ADInplaceOrView:")


def dispatcher_registrations() -> dict[str, tuple[str, ...]]:
    """The kernels registered for the harness's operators, per operator (lines of the
    dispatcher's dump for the keys that do the work)."""
    import torch

    dump = torch._C._dispatch_dump
    found = {}
    for op in _HARNESS_OPS:
        try:
            text = dump(op)
        except RuntimeError:  # an operator this torch version does not have
            continue
        found[op] = tuple(line for line in text.splitlines() if line.startswith(_KERNEL_KEYS))
    return found


def _is_watched_value(value) -> bool:
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


_sleep = time.sleep  # bound before any candidate code runs (it may replace time.sleep)

class Guard:
    """Snapshot of the runtime taken before the candidate runs, and the checks against it."""

    def __init__(self):
        # The original objects themselves (not ids, which an impostor could reuse).
        self.snapshot = {
            (space, key): value
            for space, namespace in _namespaces().items()
            for key, value in list(namespace.items())
            if _is_watched_value(value)
        }
        self.class_spaces = [f"{m}.{c}" for m, c in _WATCHED_CLASSES]
        self.kernels = dispatcher_registrations()
        self.python_threads = python_thread_ids()
        self.os_threads = os_thread_count()

    def violations(self) -> list[dict]:
        """Everything the candidate changed or left running, as {flag, detail} records. A check
        that cannot run (the candidate blocked it, e.g. with an audit hook) is a violation."""
        found = []
        for check in (self._patches, self._kernels, self._threads, self._children):
            try:
                problem = check()
            except BaseException as exc:  # noqa: BLE001 - anything here is the candidate's doing
                problem = {"flag": "patched_runtime",
                           "detail": f"the harness's {check.__name__[1:]} check was blocked: {type(exc).__name__}: {exc}"}
            if problem:
                found.append(problem)
        return found

    def _patches(self) -> dict | None:
        patched = self.patched_names()
        if patched:
            return {"flag": "patched_runtime", "detail": "replaced: " + ", ".join(patched[:12])}
        return None

    def _kernels(self) -> dict | None:
        now = dispatcher_registrations()
        changed = sorted(op for op, lines in now.items() if lines != self.kernels.get(op))
        if changed:
            return {"flag": "patched_runtime", "detail": "kernels registered over the harness's operators "
                                                         "(torch.library): " + ", ".join(changed[:8])}
        return None

    def _threads(self) -> dict | None:
        extra = python_thread_ids() - self.python_threads
        if not extra and os_thread_count() > self.os_threads:
            # A Python thread that was started but has not run yet has no frame: give it the
            # GIL for a moment (seen on a loaded CI machine: only the host's census saw it).
            # A native thread (the CUDA driver's) never gets one; this wait happens once for it.
            for _ in range(10):
                _sleep(0.005)
                extra = python_thread_ids() - self.python_threads
                if extra:
                    break
            self.os_threads = os_thread_count()
        if extra:
            return {"flag": "python_threads", "detail": f"{len(extra)} Python thread(s) left running"}
        return None

    def _children(self) -> dict | None:
        children = live_children()
        if children:
            return {"flag": "child_processes", "detail": f"child process(es) left running: {children[:5]}"}
        return None

    def patched_names(self) -> list[str]:
        current = _namespaces()
        changed = []
        for (space, key), original in self.snapshot.items():
            namespace = current.get(space)
            if namespace is None:
                continue
            value = namespace.get(key, _MISSING)
            if value is not original and not _torch_wrapper_of(value, original):
                changed.append(f"{space}.{key}")
        # A method added to a watched class shadows the one it inherits (torch.Tensor.copy_
        # comes from the C base class): every harness call of it would run the candidate's code.
        for space in self.class_spaces:
            for key, value in list(current.get(space, {}).items()):
                if (space, key) not in self.snapshot and _is_watched_value(value) and not _torch_code(value):
                    changed.append(f"{space}.{key} (added)")
        return sorted(changed)


def _torch_wrapper_of(value, original) -> bool:
    """torch patches some of its own functions lazily: importing torch._dynamo (as
    torch.compile does) wraps torch.manual_seed and replaces nn.Module.__init__ with its
    mutation guard. A replacement whose code lives inside torch's package is not the
    candidate's doing. (A white-box candidate could forge a code object's file name; the
    verdict does not rest on this guard.)"""
    if value is _MISSING or not callable(value):
        return False
    return _torch_code(value)


def _torch_code(value) -> bool:
    """Whether a Python function's code lives inside torch's package."""
    try:
        import torch

        code_file = getattr(getattr(value, "__code__", None), "co_filename", "")
        return code_file.startswith(os.path.dirname(torch.__file__) + os.sep)
    except Exception:  # noqa: BLE001 - anything odd is not a recognised torch wrapper
        return False


_MISSING = object()


def os_thread_count() -> int:
    """This process's threads as the kernel counts them, Python or native."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def python_thread_ids() -> set[int]:
    """Every thread running Python code, including ones started with `_thread` directly, which
    `threading.enumerate()` does not list."""
    return set(sys._current_frames())


def live_children() -> list[int]:
    """PIDs of running (not zombie) processes whose parent is this process."""
    me = os.getpid()
    children: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        # Format: pid (comm) state ppid ...; comm may hold spaces or parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 2 and fields[0] != "Z" and int(fields[1]) == me:
            children.append(int(entry))
    return children

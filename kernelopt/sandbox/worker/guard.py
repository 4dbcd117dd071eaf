"""Watches the worker's own runtime for tampering by the candidate it hosts.

The worker binds the functions it times and checks with *before* importing the candidate, so
reassigning `time.perf_counter` or `torch.cuda.synchronize` cannot change what the worker
measures. Such a reassignment is still a clear sign of an attempt, so the guard snapshots the
identity of every function and class in the namespaces the harness relies on and reports any
that changed. It also reports Python threads, native threads and child processes the candidate
left running (work done there would escape the timed region).
"""

from __future__ import annotations

import os
import sys
import threading

# Namespaces whose callables the harness (or the reference semantics) depends on.
_WATCHED_MODULES = (
    "builtins", "time", "gc", "os", "threading", "ctypes",
    "torch", "torch._C", "torch.cuda", "torch.nn.functional", "torch.testing",
    "torch.autograd", "torch.random",
)
_WATCHED_CLASSES = (
    ("torch", "Tensor"), ("torch.nn", "Module"), ("torch.cuda", "Event"), ("torch.cuda", "Stream"),
)


def _namespaces() -> dict[str, dict]:
    spaces: dict[str, dict] = {}
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


def _is_watched_value(value) -> bool:
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


class Guard:
    """Snapshot of the runtime taken before the candidate runs, and the checks against it."""

    def __init__(self):
        self.snapshot = {
            (space, key): id(value)
            for space, namespace in _namespaces().items()
            for key, value in list(namespace.items())
            if _is_watched_value(value)
        }
        # Keep the original objects alive so their ids cannot be recycled by impostors.
        self._originals = [
            value
            for namespace in _namespaces().values()
            for value in list(namespace.values())
            if _is_watched_value(value)
        ]
        self.python_threads = {t.ident for t in threading.enumerate()}
        self.native_threads = native_thread_count()

    def rebaseline_threads(self) -> None:
        """Record threads after the harness's own warm-up (torch starts its pools lazily)."""
        self.python_threads = {t.ident for t in threading.enumerate()}
        self.native_threads = native_thread_count()

    def violations(self) -> list[dict]:
        """Everything the candidate changed or left running, as {flag, detail} records."""
        found = []
        patched = self.patched_names()
        if patched:
            found.append({"flag": "patched_runtime", "detail": "replaced: " + ", ".join(patched[:12])})
        extra = [t for t in threading.enumerate() if t.ident not in self.python_threads and t.is_alive()]
        if extra:
            names = ", ".join(t.name for t in extra[:5])
            found.append({"flag": "python_threads", "detail": f"{len(extra)} thread(s) left running: {names}"})
        children = live_children()
        if children:
            found.append({"flag": "child_processes", "detail": f"child process(es) left running: {children[:5]}"})
        return found

    def native_thread_growth(self) -> int:
        return native_thread_count() - self.native_threads

    def patched_names(self) -> list[str]:
        current = _namespaces()
        changed = []
        for (space, key), original_id in self.snapshot.items():
            namespace = current.get(space)
            if namespace is None:
                continue
            value = namespace.get(key, _MISSING)
            if value is _MISSING or id(value) != original_id:
                changed.append(f"{space}.{key}")
        return sorted(changed)


_MISSING = object()


def native_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def live_children() -> list[int]:
    """PIDs of running (not zombie) processes whose parent is this process."""
    me = os.getpid()
    children = []
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

"""CuPy's NVRTC compiles, made by the host: `cupy.RawKernel` and `cupy.RawModule` built from
source while the candidate loads are compiled by the host's trusted compiler into its
content-addressed cache (sandbox/nvrtc.py), and loaded here from the cubin it hands back.

Why not let CuPy compile here: CuPy keeps compiled kernels in a disk cache keyed by the source;
a candidate could write a cubin of its own under the key of a later candidate's source, and
that candidate would run it. The host's cache is out of the sandbox's reach. What this hook does
not route (ElementwiseKernel, jitify, cooperative groups, relocatable code, a kernel made during
`forward`, a class reached through `cupy._core`) compiles here as CuPy would, but into memory
only (CUPY_CACHE_IN_MEMORY=1) and under a cache directory private to this worker (isolation.py),
so nothing it writes outlives the candidate.

The hook is installed in every worker, before the program is imported, and patches CuPy when
(if ever) it is imported: a worker whose program does not use CuPy never loads it.
Standard library only (CuPy itself is the candidate's import).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .extensions import ExtensionTracker

# Options CuPy's compiles take that need a link step or a translation the host does not do.
_IN_PROCESS_OPTIONS = ("-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c", "-dlto", "-G",
                       "--device-debug")


class CupyCompiles:
    """Routes CuPy compiles to the host while `request` is set (the candidate's load); records
    each with the extension tracker's builds (kinds.py reads them) and a failure's log in its
    build log (the compile error's feedback)."""

    def __init__(self, tracker: ExtensionTracker) -> None:
        self.tracker = tracker
        # Set by the worker: sends a compile request, returns the host's reply.
        self.request: Callable[[dict], dict] | None = None
        self._compiled: dict[tuple, dict] = {}  # one host compile per distinct source and options
        self.installed = False

    def install(self) -> None:
        self.installed = True
        if "cupy" in sys.modules:
            self._patch(sys.modules["cupy"])
        else:
            sys.meta_path.insert(0, _PatchAfterImport("cupy", self._patch))

    def compile(self, source: str, options, name_expressions, kernel: str | None) -> dict | None:
        """The host's compile of one source: {"path", "lowered"}; None when this compile is
        not the host's to make (CuPy then compiles it in process). RuntimeError on a compile
        error, with NVRTC's log, as CuPy raises its own."""
        if self.request is None or not isinstance(source, str):
            return None
        options = tuple(str(o) for o in (options or ()))
        if any(o in _IN_PROCESS_OPTIONS for o in options):
            return None
        expressions = [str(e) for e in name_expressions] if name_expressions else None
        key = (source, options, tuple(expressions or ()))
        if key in self._compiled:
            return self._compiled[key]
        record = {"builder": "nvrtc", "name": kernel or "RawModule", "cuda": True, "ok": False}
        self.tracker.builds.append(record)
        reply = self.request({"builder": "nvrtc", "source": source, "options": list(options),
                              "name_expressions": expressions, "kernel": kernel})
        record["cached"] = bool(reply.get("cached"))
        if not reply.get("ok"):
            self.tracker.build_log += str(reply.get("log", ""))[-20000:] + "\n"
            raise RuntimeError(f"NVRTC compilation of {kernel or 'a RawModule'} failed: "
                               f"{reply.get('error', '')}\n{str(reply.get('log', ''))[-4000:]}")
        record["ok"] = True
        self._compiled[key] = {"path": str(reply["path"]), "lowered": dict(reply.get("lowered") or {})}
        return self._compiled[key]

    def _patch(self, cupy) -> None:
        # CuPy's classes, found at run time (CuPy is optional): the hook's classes derive from them.
        raw_kernel: Any = cupy.RawKernel
        raw_module: Any = cupy.RawModule
        if getattr(raw_kernel, "_kernelopt_hook", False):
            return
        _follow_torchs_device(cupy)
        hook = self

        class CompiledModule(raw_module):
            """A module loaded from the host's cubin; name expressions map to their lowered names."""

            def __init__(self, path: str, lowered: dict):
                super().__init__(path=path)
                self._lowered = lowered

            def get_function(self, name):
                return super().get_function(self._lowered.get(name, name))

        class RawKernel(raw_kernel):
            _kernelopt_hook = True

            def __new__(cls, code, name, options=(), backend="nvrtc", *, translate_cucomplex=False,
                        enable_cooperative_groups=False, jitify=False):
                compiled = None
                if backend == "nvrtc" and not (translate_cucomplex or enable_cooperative_groups or jitify):
                    compiled = hook.compile(code, options, None, name)
                if compiled is None:
                    return raw_kernel(code, name, options, backend, translate_cucomplex=translate_cucomplex,
                                      enable_cooperative_groups=enable_cooperative_groups, jitify=jitify)
                return raw_module(path=compiled["path"]).get_function(name)

        class RawModule(raw_module):
            _kernelopt_hook = True

            def __new__(cls, code=None, *, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                        enable_cooperative_groups=False, name_expressions=None, jitify=None):
                compiled = None
                if (code is not None and path is None and backend == "nvrtc"
                        and not (translate_cucomplex or enable_cooperative_groups or jitify)):
                    compiled = hook.compile(code, options, name_expressions, None)
                if compiled is None:
                    return raw_module(code=code, path=path, options=options, backend=backend,
                                      translate_cucomplex=translate_cucomplex,
                                      enable_cooperative_groups=enable_cooperative_groups,
                                      name_expressions=name_expressions, jitify=jitify)
                return CompiledModule(compiled["path"], compiled["lowered"])

        RawKernel.__name__ = RawKernel.__qualname__ = "RawKernel"
        RawModule.__name__ = RawModule.__qualname__ = "RawModule"
        cupy.RawKernel, cupy.RawModule = RawKernel, RawModule


def _follow_torchs_device(cupy) -> None:
    """CuPy's current device is torch's: CuPy keeps a runtime of its own, whose current device
    is 0 whatever torch.cuda.set_device chose, and a module loaded (or an array viewed) there
    would not be on the evaluation's device."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            cupy.cuda.runtime.setDevice(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - no usable GPU: CuPy reports that itself when used
        pass


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Runs `patch(module)` right after the named module is first imported."""

    def __init__(self, name: str, patch):
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the search below must not find this finder
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, patch = spec.loader, self.patch

        class Patching(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                patch(module)

        spec.loader = Patching()
        return spec

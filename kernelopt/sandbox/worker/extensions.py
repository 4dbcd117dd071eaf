"""The extension tracker: wraps torch's extension builders inside the worker so that the host can
label what a candidate builds and calls (kinds.py reads the records), and asks the host to build
when the evaluation offers host builds (sandbox/build_serving.py). Standard library and torch only,
like the rest of the worker."""

from __future__ import annotations

import os
from collections.abc import Callable

class ExtensionTracker:
    """Wraps torch's extension builders to label what the candidate builds and calls.

    The wrappers record build attempts and failures (a failed build is a compile error, with
    its log) and hand back the built module behind a proxy that counts calls, so the referee
    can tell a custom kernel that runs from one that is built and then bypassed.
    """

    def __init__(self) -> None:
        self.builds: list[dict] = []
        self.calls = 0
        self.build_log = ""
        # Set when the host builds extensions (see builds.py): sends a request, returns the reply.
        self.request_build: Callable[[dict], dict] | None = None
        self.installed = False
        self.delivered: dict[str, str] = {}  # extension name -> the library the host built (for profiling)

    def install(self) -> None:
        from torch.utils import cpp_extension

        self.installed = True
        for name in ("load_inline", "load"):
            original = getattr(cpp_extension, name)
            setattr(cpp_extension, name, self._wrap_builder(name, original))

    def _wrap_builder(self, builder_name, original):
        tracker = self

        def build(*args, **kwargs):
            record = {
                "builder": builder_name,
                "name": kwargs.get("name", args[0] if args else "?"),
                "cuda": bool(kwargs.get("cuda_sources") or (len(args) > 2 and args[2])
                             or any(str(s).endswith(".cu") for s in kwargs.get("sources", []) or [])),
                "ok": False,
            }
            tracker.builds.append(record)
            try:
                request = build_request(builder_name, original, args, kwargs)
                if request is not None and tracker.request_build is not None:
                    module = tracker.build_on_host(request, record)
                else:
                    module = original(*args, **kwargs)
            except BaseException as exc:
                tracker.build_log += f"{type(exc).__name__}: {exc}\n"
                raise
            record["ok"] = True
            return _CountingModule(module, tracker)

        build.__wrapped__ = original  # type: ignore[attr-defined]  # (inspect.unwrap finds torch's builder)
        return build

    def build_on_host(self, request: dict, record: dict):
        """Ask the host for the build; load the library it hands back."""
        import importlib.util

        if self.request_build is None:
            raise RuntimeError("this worker builds no extension on the host")
        reply = self.request_build(request)
        record["cached"] = bool(reply.get("cached"))
        record["lean"] = bool(reply.get("lean"))
        if not reply.get("ok"):
            self.build_log += str(reply.get("log", ""))[-20000:] + "\n"
            raise RuntimeError(f"Error building extension '{request['name']}': {reply.get('error', '')}")
        self.delivered[request["name"]] = reply["path"]
        spec = importlib.util.spec_from_file_location(request["name"], reply["path"])
        if spec is None or spec.loader is None:
            raise RuntimeError(f"the extension {request['name']!r} the host built cannot be imported from "
                               f"{reply['path']}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def build_request(builder_name: str, original, args: tuple, kwargs: dict) -> dict | None:
    """The call as a build request for the host, or None for what only torch's own builder
    handles (SYCL, non-module libraries, standalone executables): those build in place."""
    import inspect

    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return None  # let torch raise its own error for a bad call
    call = bound.arguments
    if not call.get("is_python_module", True) or call.get("is_standalone", False):
        return None
    if call.get("sycl_sources") or call.get("extra_sycl_cflags") or call.get("with_sycl"):
        return None
    request = {"builder": builder_name, "name": call["name"],
               "extra_cflags": _strings(call.get("extra_cflags")),
               "extra_cuda_cflags": _strings(call.get("extra_cuda_cflags")),
               "extra_ldflags": _strings(call.get("extra_ldflags")),
               "extra_include_paths": _strings(call.get("extra_include_paths")),
               "with_cuda": call.get("with_cuda")}
    if builder_name == "load_inline":
        functions = call.get("functions")
        request.update(cpp_sources=_strings(call.get("cpp_sources")), cuda_sources=_strings(call.get("cuda_sources")),
                       functions=[functions] if isinstance(functions, str) else functions,
                       with_pytorch_error_handling=call.get("with_pytorch_error_handling", True),
                       no_implicit_headers=call.get("no_implicit_headers", False))
    else:
        sources = {}
        for path in _strings(call.get("sources")):
            with open(path, encoding="utf-8") as handle:
                sources[os.path.basename(path)] = handle.read()
            if '#include "' in sources[os.path.basename(path)]:
                return None  # local headers the host builder would not see: build in place
        if len(sources) != len(_strings(call.get("sources"))):
            return None  # two sources with one file name: build in place
        request["sources"] = sources
    return request


def _strings(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


class _CountingModule:
    """A built extension module whose functions count their calls."""

    def __init__(self, module, tracker: ExtensionTracker):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_tracker", tracker)

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if callable(value) and not isinstance(value, type):
            tracker = self._tracker

            def counted(*args, **kwargs):
                tracker.calls += 1
                return value(*args, **kwargs)

            return counted
        return value

    def __dir__(self):
        return dir(self._module)

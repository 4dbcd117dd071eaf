"""Extension builds for candidates: built by the host's builder, kept in a shared cache.

A candidate that calls `load_inline`/`load` does not compile in its own process: its worker
sends the call's arguments (a build request) to the host, which looks the build up in a
content-addressed cache and otherwise runs the trusted builder (`worker/build_runner.py`) in a
sandbox of its own, then hands the worker a private copy of the library to load. Why the
candidate's process never builds: it could place any library in its build directory before
calling `load_inline` (ninja would call it up to date), and a cache fed by it would serve that
library to every later candidate with the same sources. The builder runs no candidate code
(it never loads what it built), and only the host writes the cache.

Cache layout (root: $KERNELOPT_BUILD_CACHE or ~/.cache/kernelopt/builds):
  entries/KEY/meta.json   what was built, from what, the log, the library's sha256
  entries/KEY/NAME.so     the library (absent for a cached compile error); a CuPy kernel's
                          entry (sandbox/nvrtc.py) holds kernel.cubin instead
  locks/KEY.lock          flock: one build per key at a time, across processes
  staging/                builds in progress; finished entries are renamed into entries/
  pch/                    precompiled headers made by `kernelopt cache warm` (docs/builds.md)
KEY hashes the request (sources, flags, module name), the build mode and the toolchain (torch,
CUDA, nvcc and C++ compiler versions, target architectures). An entry whose files do not match
its meta.json is deleted and rebuilt. The least recently used entries are evicted past the
size bound ($KERNELOPT_BUILD_CACHE_MAX, default 20G).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from kernelopt.sandbox import isolation

BUILDER_VERSION = 2  # 2: module ids from the toolchain (shared host prefix)
BuildMode = Literal["fast", "exact", "stock"]
BUILD_MODES = ("fast", "exact", "stock")
DEFAULT_MAX_BYTES = 20 << 30
MAX_REQUEST_BYTES = 8 << 20
_SANDBOX_DIR = Path(__file__).resolve().parent
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


class BuildRequest(BaseModel):
    """What a candidate passed to load_inline/load. Comes from the candidate's worker:
    untrusted, validated."""

    model_config = ConfigDict(extra="forbid")

    builder: Literal["load_inline", "load"]
    name: str
    cpp_sources: list[str] = []
    cuda_sources: list[str] = []
    sources: dict[str, str] = {}
    functions: list[str] | dict[str, str] | None = None
    extra_cflags: list[str] = []
    extra_cuda_cflags: list[str] = []
    extra_ldflags: list[str] = []
    extra_include_paths: list[str] = []
    with_cuda: bool | None = None
    with_pytorch_error_handling: bool = True
    no_implicit_headers: bool = False

    @field_validator("name")
    @classmethod
    def _module_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"extension name {value[:60]!r} is not a Python identifier")
        return value

    @field_validator("sources")
    @classmethod
    def _file_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _FILE_NAME.match(name) or not name.endswith((".cpp", ".cc", ".cxx", ".cu", ".c")):
                raise ValueError(f"source file name {name[:60]!r} is not a plain C++/CUDA file name")
        return value


class BuildFailure(Exception):
    """The build could not be judged (builder crashed or ran out of time); not cached."""


class CachedBuild(BaseModel):
    key: str
    ok: bool
    name: str
    library: str | None = None  # path of NAME.so (or `file`) inside the entry
    file: str = ""  # the library's file name in the entry; "" means NAME.so
    lowered: dict[str, str] = {}  # an NVRTC compile's name expressions -> their lowered names
    log: str = ""
    mode: str = ""
    lean: bool = False
    seconds: float = 0.0
    cached: bool = False  # this lookup found it (False: built now)


def parse_request(raw: object) -> BuildRequest:
    """A worker's build request, or ValueError with what is wrong with it."""
    if not isinstance(raw, dict):
        raise ValueError("a build request must be a JSON object")
    if len(json.dumps(raw)) > MAX_REQUEST_BYTES:
        raise ValueError(f"a build request over {MAX_REQUEST_BYTES >> 20} MiB of sources")
    try:
        return BuildRequest.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"malformed build request: {exc.errors()[0].get('msg', exc)}") from None


@functools.lru_cache(maxsize=None)
def toolchain(arch_list: str) -> dict:
    """What besides the sources decides the bytes of a build."""
    import platform

    import torch

    return {"torch": torch.__version__, "torch_git": getattr(torch.version, "git_version", ""),
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "machine": platform.machine(), "nvcc": _first_line(["nvcc", "--version"], last=True),
            "cxx": _first_line([os.environ.get("CXX", "c++"), "--version"]), "arch_list": arch_list}


def _first_line(command: list[str], last: bool = False) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return "absent"
    return (out[-1] if last else out[0]) if out else "absent"


def build_key(request: BuildRequest, mode: str, arch_list: str) -> str:
    payload = {"request": request.model_dump(), "mode": mode, "builder": BUILDER_VERSION,
               "toolchain": toolchain(arch_list)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def default_cache_root() -> Path:
    configured = os.environ.get("KERNELOPT_BUILD_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "kernelopt" / "builds"


def default_max_bytes() -> int:
    from kernelopt.sandbox.sizes import parse_size

    configured = os.environ.get("KERNELOPT_BUILD_CACHE_MAX")
    return parse_size(configured) if configured else DEFAULT_MAX_BYTES


class BuildCache:
    """The shared, bounded, content-addressed store of builds. Safe across threads and
    processes: entries appear by atomic rename, builds of one key are serialized by a lock."""

    def __init__(self, root: Path | str | None = None, max_bytes: int | None = None):
        self.root = Path(root) if root is not None else default_cache_root()
        self.max_bytes = max_bytes if max_bytes is not None else default_max_bytes()
        for sub in ("entries", "locks", "staging", "pch"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def pch_root(self) -> Path:
        """Precompiled headers made by `warm`: torch/extension.h per (toolchain, C++ flags),
        and cuda-*/prefix.h, the host prefix of CUDA sources per (toolchain, CUDA flags)."""
        return self.root / "pch"

    def entry_dir(self, key: str) -> Path:
        return self.root / "entries" / key

    def lookup(self, key: str) -> CachedBuild | None:
        """The entry for `key`, or None; a damaged entry is removed (and so rebuilt)."""
        directory = self.entry_dir(key)
        meta_path = directory / "meta.json"
        if not directory.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            build = CachedBuild(key=key, ok=meta["ok"], name=meta["name"], log=meta.get("log", ""),
                                mode=meta.get("mode", ""), lean=meta.get("lean", False),
                                seconds=meta.get("seconds", 0.0), file=meta.get("file", ""),
                                lowered=meta.get("lowered", {}), cached=True)
            if build.ok:
                library = directory / (build.file or f"{build.name}.so")
                if _sha256(library) != meta["sha256"]:
                    raise ValueError("library does not match its recorded hash")
                build.library = str(library)
        except (OSError, ValueError, KeyError, TypeError, ValidationError):
            self.remove(key)
            return None
        with contextlib.suppress(OSError):
            os.utime(meta_path)  # last use, for eviction
        return build

    def store(self, key: str, build: CachedBuild, library: Path | None) -> CachedBuild:
        """Publish a finished build (atomically); returns the entry as stored."""
        if build.ok and library is None:
            raise ValueError(f"the build {build.name!r} succeeded but no library was given to store")
        staging = self.root / "staging" / f"entry-{key[:16]}-{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        meta = {"key": key, "ok": build.ok, "name": build.name, "log": build.log[-200_000:],
                "mode": build.mode, "lean": build.lean, "seconds": build.seconds, "created": time.time(),
                "file": build.file, "lowered": build.lowered}
        if build.ok and library is not None:  # (a successful build always has its library: checked above)
            file_name = build.file or f"{build.name}.so"
            shutil.copy2(library, staging / file_name)
            meta["sha256"] = _sha256(staging / file_name)
        (staging / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        try:
            os.rename(staging, self.entry_dir(key))
        except OSError:  # another process published the same key first: theirs stands
            shutil.rmtree(staging, ignore_errors=True)
        self.evict(protect={key})
        stored = self.lookup(key)
        if stored is None:
            raise BuildFailure("the build cache lost an entry just stored (removed by another process?)")
        return stored.model_copy(update={"cached": False})

    @contextlib.contextmanager
    def lock(self, key: str):
        """Exclusive per-key lock (fcntl.flock: released if the holder dies)."""
        with open(self.root / "locks" / f"{key}.lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def entries(self) -> list[dict]:
        found = []
        for directory in (self.root / "entries").iterdir():
            try:
                meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
                used = (directory / "meta.json").stat().st_mtime
            except (OSError, ValueError):
                meta, used = {}, 0.0
            size = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
            found.append({"key": directory.name, "name": meta.get("name"), "ok": meta.get("ok"),
                          "bytes": size, "last_used": used, "mode": meta.get("mode")})
        return found

    def evict(self, protect: AbstractSet[str] = frozenset()) -> list[str]:
        """Remove least recently used entries until the cache fits its bound."""
        entries = sorted(self.entries(), key=lambda e: e["last_used"])
        total = sum(e["bytes"] for e in entries)
        removed = []
        for entry in entries:
            if total <= self.max_bytes:
                break
            if entry["key"] in protect:
                continue
            self.remove(entry["key"])
            total -= entry["bytes"]
            removed.append(entry["key"])
        return removed

    def remove(self, key: str) -> None:
        directory = self.entry_dir(key)
        trash = self.root / "staging" / f"trash-{uuid.uuid4().hex}"
        try:
            os.rename(directory, trash)  # gone from entries/ in one step
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def info(self) -> dict:
        entries = self.entries()
        headers = [d for d in self.pch_root.iterdir() if d.is_dir()]
        return {"root": str(self.root), "entries": len(entries),
                "failed_builds": sum(1 for e in entries if e["ok"] is False),
                "bytes": sum(e["bytes"] for e in entries), "max_bytes": self.max_bytes,
                "precompiled_headers": len(headers),
                "precompiled_header_bytes": sum(_tree_bytes(d) for d in headers)}

    def clear(self) -> int:
        keys = [e["key"] for e in self.entries()]
        for key in keys:
            self.remove(key)
        for sub in ("staging", "pch"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
            (self.root / sub).mkdir(exist_ok=True)
        return len(keys)


def _tree_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


class BuildService:
    """Answers workers' build requests: cache lookup, else a sandboxed build, then a private
    copy of the library in the asking worker's scratch directory."""

    def __init__(self, cache: BuildCache, backend: isolation.Backend, mode: str = "fast", builder=None):
        if mode not in BUILD_MODES:
            raise ValueError(f"unknown build mode {mode!r}: use one of {', '.join(BUILD_MODES)}")
        self.cache, self.backend, self.mode = cache, backend, mode
        self.builder = builder or run_builder  # (request, build_dir, mode, key, arch_list, backend, deadline)

    def build(self, request: BuildRequest, device: str, deadline: float) -> CachedBuild:
        arch_list = target_architectures(device)
        key = build_key(request, self.mode, arch_list)
        found = self.cache.lookup(key)
        if found is not None:
            return found
        with self.cache.lock(key):
            found = self.cache.lookup(key)  # built by another worker while we waited
            if found is not None:
                return found
            return self._build_and_store(request, key, arch_list, deadline)

    def deliver(self, build: CachedBuild, scratch: Path) -> str:
        """Copy the library where the worker can load it; the cache itself stays out of the
        sandbox (and out of the candidate's reach)."""
        if build.library is None:
            raise ValueError(f"the build {build.key[:16]} failed: it has no library to deliver")
        target = scratch / "builds" / build.key[:24] / f"{build.name}.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build.library, target)
        return str(target)

    def warm(self, extra_cflags: list[str], device: str = "cpu", timeout: float = 1800.0,
             with_cuda: bool = False) -> Path:
        """Precompile torch/extension.h for the C++ flags of extensions built with
        `extra_cflags` (`with_cuda`: of extensions that also have CUDA sources, whose C++ flags
        add the CUDA headers); later `fast` builds with those flags compile main.cpp from it."""
        request = parse_request({"builder": "load_inline", "name": "kernelopt_pch", "cpp_sources": [""],
                                 "extra_cflags": list(extra_cflags), "with_cuda": with_cuda or None})
        return self._precompile(request, "pch", device, timeout)

    def warm_cuda(self, extra_cuda_cflags: list[str], device: str = "cpu", timeout: float = 1800.0) -> Path:
        """Precompile the host prefix of CUDA sources built with `extra_cuda_cflags` (what
        load_inline puts in front of every CUDA source, as cudafe++ hands it to the host
        compiler); later `fast` builds with those flags compile their host code from it."""
        request = parse_request({"builder": "load_inline", "name": "kernelopt_pch", "cpp_sources": [""],
                                 "cuda_sources": [""], "extra_cuda_cflags": list(extra_cuda_cflags),
                                 "with_cuda": True})
        return self._precompile(request, "pch-cuda", device, timeout)

    def _precompile(self, request: BuildRequest, mode: str, device: str, timeout: float) -> Path:
        arch_list = target_architectures(device)
        staging = self.cache.root / "staging" / f"pch-{uuid.uuid4().hex[:12]}"
        (staging / "build").mkdir(parents=True)
        try:
            result = run_builder(request, staging / "build", mode, build_key(request, mode, arch_list),
                                 arch_list, self.backend, time.monotonic() + timeout)
            if not result["ok"]:
                raise BuildFailure(_failure_text(result)[-3000:])
            made = Path(result["so"])
            target = self.cache.pch_root / made.name
            with contextlib.suppress(OSError):  # already there: an identical header
                os.rename(made, target)
            return target
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _build_and_store(self, request: BuildRequest, key: str, arch_list: str, deadline: float) -> CachedBuild:
        staging = self.cache.root / "staging" / f"build-{key[:16]}-{uuid.uuid4().hex[:8]}"
        build_dir = staging / "build"
        build_dir.mkdir(parents=True)
        try:
            result = self.builder(request, build_dir, self.mode, key, arch_list, self.backend, deadline,
                                  pch_root=self.cache.pch_root)
            build = CachedBuild(key=key, ok=result["ok"], name=request.name,
                                log=_failure_text(result), mode=self.mode, lean=bool(result.get("lean")),
                                seconds=float(result.get("seconds", 0.0)))
            library = Path(result["so"]) if result["ok"] else None
            return self.cache.store(key, build, library)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _failure_text(result: dict) -> str:
    if result["ok"]:
        return result.get("log", "")
    return (result.get("error", "") + "\n" + result.get("log", "")).strip()


def target_architectures(device: str) -> str:
    """TORCH_CUDA_ARCH_LIST for builds: the user's, else the device's own, else Hopper."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if device.startswith("cuda"):
        import torch

        major, minor = torch.cuda.get_device_capability(torch.device(device))
        return f"{major}.{minor}"
    return isolation.DEFAULT_CUDA_ARCH_LIST_WITHOUT_GPU


def builder_spec(request: BuildRequest, build_dir: Path, mode: str, arch_list: str,
                 pch_root: Path | None = None) -> dict:
    """What the builder (worker/build_runner.py) is given: the request and where and how to
    build it. The module id depends only on the toolchain, so that every build's cudafe++
    output can share one precompiled host prefix (see the builder)."""
    toolchain_key = hashlib.sha256(json.dumps(toolchain(arch_list), sort_keys=True).encode()).hexdigest()
    return dict(request.model_dump(), build_dir=str(build_dir), mode=mode, toolchain_key=toolchain_key,
                pch_root=str(pch_root) if pch_root else None,
                module_name=request.name, module_id=f"_ko_{toolchain_key[:16]}")


def run_builder(request: BuildRequest, build_dir: Path, mode: str, key: str, arch_list: str,
                backend: isolation.Backend, deadline: float, pch_root: Path | None = None) -> dict:
    """Run worker/build_runner.py on the request in a sandbox whose only writable place is
    `build_dir`'s parent. Raises BuildFailure when it cannot finish."""
    spec = builder_spec(request, build_dir, mode, arch_list, pch_root)
    return run_trusted_tool("build_runner", spec, build_dir.parent, backend, deadline, "the extension builder",
                            read_only=(pch_root,) if pch_root else (), env={"TORCH_CUDA_ARCH_LIST": arch_list})


def run_trusted_tool(module: str, spec: dict, scratch: Path, backend: isolation.Backend, deadline: float,
                     what: str, read_only: tuple[Path, ...] = (), env: dict[str, str] | None = None) -> dict:
    """Run the trusted `worker/MODULE.py` (a builder or compiler: it runs no candidate code) on
    `spec` in a sandbox whose only writable place is `scratch`, and return the result it wrote.
    Raises BuildFailure when it cannot finish in time or writes no result."""
    (scratch / "tmp").mkdir(exist_ok=True)
    (scratch / "request.json").write_text(json.dumps(spec), encoding="utf-8")
    boot = f"import sys; sys.path.insert(0, {str(_SANDBOX_DIR)!r}); from worker.{module} import main; " \
           "sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-E", "-s", "-c", boot, str(scratch / "request.json"), str(scratch / "result.json")]
    command = isolation.wrap_command(backend, command, scratch, "cpu", (), read_only=read_only)
    timeout = max(1.0, deadline - time.monotonic())
    try:
        process = subprocess.Popen(command, cwd=scratch, env=isolation.scrubbed_environment(scratch, env),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise BuildFailure(f"{what} did not finish in {timeout:.0f} s") from None
    try:
        return json.loads((scratch / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tail = output.decode(errors="replace")[-3000:]
        raise BuildFailure(f"{what} exited with code {process.returncode}:\n{tail}") from None


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, 9)
    process.wait()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()

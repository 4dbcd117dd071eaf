"""Isolation backends: how a worker process is confined.

bubblewrap (strongest available without a container runtime): new user, PID, network, IPC and
UTS namespaces; the root filesystem read-only; fresh /tmp and /dev/shm; the home directory
hidden; the worker's scratch directory the only writable place.
unshare: network and PID namespaces only; files are not confined (a warning says so).
none: a plain process; only the scrubbed environment and the limits (a warning says so).

Every backend gets: an environment built from an allowlist (no API keys, tokens or other
secrets), its own session (process group) so the host can kill the whole tree, and the host's
memory watchdog.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Variables a worker may inherit. Everything else (keys, tokens, credentials) is dropped.
ENV_ALLOWLIST = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
    "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CC", "CXX",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS",
)
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")


class IsolationError(RuntimeError):
    """The requested backend cannot run on this machine."""


@dataclass
class Backend:
    name: str
    network_isolated: bool
    filesystem_confined: bool
    pid_namespace: bool
    warnings: list[str] = field(default_factory=list)
    image: str | None = None  # the docker backend's sandbox image


# Without a GPU torch cannot infer the architectures to build CUDA code for; compile for Hopper
# (H100/H200) unless told otherwise, so CUDA candidates still compile on CPU-only machines.
DEFAULT_CUDA_ARCH_LIST_WITHOUT_GPU = "9.0"


def scrubbed_environment(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key in ENV_ALLOWLIST and not any(m in key for m in _SECRET_MARKERS)
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    cuda_home = detect_cuda_home()
    if cuda_home and "CUDA_HOME" not in env:
        env["CUDA_HOME"] = cuda_home
    env.update({
        "HOME": str(scratch),
        "TMPDIR": str(scratch / "tmp"),
        "TORCH_EXTENSIONS_DIR": str(scratch / "torch_extensions"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        # The same glibc heap policy for every worker: blocks up to 32 MiB come from the heap
        # and stay there instead of being mapped and unmapped per call, so host-memory
        # allocation costs neither dominate CPU timings nor differ between the two workers.
        "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
        "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
        "MALLOC_TOP_PAD_": str(64 << 20),
        # torch.compile compiles in the worker's own thread: no compile pool threads or
        # processes that would outlive the call (and look like the candidate's).
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        # The two workers take turns on the same cores: OpenMP threads that spin while idle
        # (the default) would steal the cores from the worker being timed. Passive waiting
        # makes an idle worker's threads sleep, for both workers alike.
        "OMP_WAIT_POLICY": "PASSIVE",
    })
    # One host thread per worker unless the user says otherwise (OMP_NUM_THREADS and
    # MKL_NUM_THREADS pass the allowlist): a parallel region waits for its slowest thread, so on
    # a shared machine any preempted thread turned into timing noise (an identical matmul +
    # softmax measured up to 1.44x). Both workers get the same, so speedups stay fair.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", env["OMP_NUM_THREADS"])
    env.update(allocator_environment())
    env.update(kernel_cache_environment(scratch))
    env.update(extra or {})
    return env


def kernel_cache_environment(scratch: Path) -> dict[str, str]:
    """Every cache a kernel compiler keeps on disk points into this worker's own, fresh scratch
    directory: a candidate that writes a compiled kernel there (a forged cubin under the key of
    another program's source) writes it where no later candidate looks. CuPy keeps what it
    compiles in memory only (the host compiles the kernels it is asked for, sandbox/nvrtc.py);
    Triton and torch.compile (Inductor) compile in process at first launch and cache here, so
    each candidate compiles its kernels cold (docs/builds.md)."""
    triton = scratch / ".triton"
    return {"CUPY_CACHE_DIR": str(scratch / ".cupy" / "kernel_cache"), "CUPY_CACHE_IN_MEMORY": "1",
            "TRITON_HOME": str(scratch), "TRITON_CACHE_DIR": str(triton / "cache"),
            "TRITON_DUMP_DIR": str(triton / "dump"), "TRITON_OVERRIDE_DIR": str(triton / "override"),
            "TORCHINDUCTOR_CACHE_DIR": str(scratch / "torchinductor")}


# Where Debian, Ubuntu and Fedora put jemalloc's shared library (package libjemalloc2 /
# jemalloc); KERNELOPT_JEMALLOC names another, KERNELOPT_ALLOCATOR=glibc turns it off.
JEMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2",
    "/usr/local/lib/libjemalloc.so.2",
)


@functools.lru_cache(maxsize=None)
def jemalloc_library() -> str | None:
    """jemalloc's shared library for the workers, or None (they keep glibc's malloc)."""
    if os.environ.get("KERNELOPT_ALLOCATOR", "").lower() == "glibc":
        return None
    named = os.environ.get("KERNELOPT_JEMALLOC")
    for path in ((named,) if named else JEMALLOC_PATHS):
        if os.path.isfile(path):
            return path
    return None


def allocator_environment() -> dict[str, str]:
    """Both workers allocate host memory through jemalloc when it is installed.

    Why: under glibc's malloc, small allocations between calls split the block a CPU kernel's
    output was freed into, so the next output lands somewhere else in the heap, often in
    memory no cache holds. How far it wanders is a trait of each process's heap history: an
    exact copy of a 1 MiB elementwise kernel ran 45 us a call in one worker and 100 us in the
    other, and measured 0.5x-2x against itself. jemalloc keeps large blocks apart from small
    ones and reuses a freed block first, so every worker's output lands in the same warm
    memory (the same copy: 48-53 us in every worker). Freed pages are never returned to the
    system during a worker's life (decay off), so no call pays for faulting them back in."""
    library = jemalloc_library()
    if library is None:
        return {}
    return {"LD_PRELOAD": library, "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1,background_thread:false"}


@functools.lru_cache(maxsize=None)
def detect_cuda_home() -> str | None:
    """The CUDA toolkit for extension builds. torch guesses it from the location of `nvcc`,
    which is wrong when `nvcc` on PATH is a wrapper script; prefer a directory that holds
    the toolkit's headers."""
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(variable):
            return os.environ[variable]
    nvcc = shutil.which("nvcc")
    guesses = [str(Path(os.path.realpath(nvcc)).parents[1])] if nvcc else []
    guesses.append("/usr/local/cuda")
    for guess in guesses:
        if (Path(guess) / "include" / "cuda.h").is_file():
            return guess
    return None


def select_backend(choice: str, image: str | None = None) -> Backend:
    """Resolve 'auto' to the strongest backend that works here; check an explicit choice.
    'docker' is never chosen by 'auto' (it needs an image); its checks run in
    kernelopt.sandbox.containers.connect."""
    if choice == "docker":
        return Backend("docker", True, True, True, image=image or "kernelopt-sandbox")
    if choice in ("auto", "bubblewrap") and _bubblewrap_works():
        return Backend("bubblewrap", True, True, True)
    if choice == "bubblewrap":
        raise IsolationError(
            "bubblewrap is not usable here: install it (apt-get install bubblewrap) and make sure "
            "unprivileged user namespaces are allowed, or choose --isolation unshare|none"
        )
    if choice in ("auto", "unshare") and _unshare_works():
        warnings = ["files are not confined (unshare backend): install bubblewrap for full isolation"]
        if choice == "auto":
            warnings.insert(0, "bubblewrap unavailable; fell back to unshare (network and PID namespaces)")
        return Backend("unshare", True, False, True, warnings)
    if choice == "unshare":
        raise IsolationError("unshare cannot create network/PID namespaces here; choose --isolation none")
    warnings = ["no namespace isolation available: the candidate can reach the network and the "
                "filesystem; install bubblewrap (apt-get install bubblewrap)"]
    return Backend("none", False, False, False, warnings)


def device_inside(backend: Backend, device: str) -> str:
    """The device's name as the worker sees it: a container sees its one GPU as cuda:0."""
    if backend.name == "docker" and device.startswith("cuda"):
        return "cuda:0"
    return device


def backend_works(name: str) -> bool:
    """Whether the named backend can start a sandbox here (a real probe, cached)."""
    return {"bubblewrap": _bubblewrap_works, "unshare": _unshare_works}.get(name, lambda: name == "none")()


def wrap_command(backend: Backend, command: list[str], scratch: Path, device: str,
                 pass_fds: tuple[int, ...], read_only: tuple[Path, ...] = ()) -> list[str]:
    """The command line that runs `command` under the backend. `read_only`: directories the
    sandbox may read even where they lie under a hidden directory (the builder's headers)."""
    if backend.name == "bubblewrap":
        return _bubblewrap_prefix(scratch, device, read_only) + ["--"] + command
    if backend.name == "unshare":
        return _unshare_prefix() + command
    return command


def cgroup_escape(backend: Backend) -> str:
    """Why a worker under `backend` could move its processes out of their kernel group (the
    host's containment, sandbox/containment.py), or "" when it cannot: bubblewrap mounts the
    root read-only in a user namespace, a container has its own cgroup namespace, and unshare's
    worker gets a fresh read-only /sys and no capabilities (`_unshare_prefix`). A plain process
    runs as the user that made the group, so it may write the group's files."""
    if backend.name != "none":
        return ""
    return ("the none backend runs the worker as this user without namespaces, so it may write the cgroup "
            "filesystem and move its processes out of their group")


# The unshare worker's confinement of the cgroup filesystem: /sys becomes a fresh read-only sysfs,
# which has no cgroup mounts under it, its /proc is made read-only (as root, /proc/sys's files are
# the worker's to write without any capability: kernel.core_pattern runs a program of its choice
# as the host's root), and the worker keeps no capabilities (bounding and
# inheritable sets emptied, no new privileges), so it can neither write the host's cgroup files nor
# mount a cgroup filesystem of its own: its processes stay in the group the host made for it. As
# root the mount must work; in a user namespace (not root) /sys's cgroup files are not the
# worker's to write anyway, so a refused mount is let pass.
# The shell stays the PID namespace's init (no exec, and a command after the worker so that the
# shell cannot exec it as its last): as init the worker would ignore its own SIGKILL and adopt
# every orphan, where under bubblewrap it does neither; the same candidate must meet the same
# sandbox under either backend (seen on an H200, where unshare was the default).
_CONFINE = ('mount -t sysfs -o ro,nosuid,nodev,noexec sysfs /sys {then} mount -o remount,bind,ro /proc {then} '
            'setpriv --no-new-privs --bounding-set=-all --inh-caps=-all -- "$@"; exit $?')


def _unshare_prefix() -> list[str]:
    script = _CONFINE.format(then="&&" if os.geteuid() == 0 else "2>/dev/null;")
    return ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", *_unshare_user_flags(), "--",
            "/bin/sh", "-c", script, "kernelopt-confine"]


def _bubblewrap_prefix(scratch: Path, device: str, read_only: tuple[Path, ...] = ()) -> list[str]:
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-all",
            "--ro-bind", "/", "/", "--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev"]
    args += _kernel_confinement()
    if device.startswith("cuda"):
        for node in sorted(Path("/dev").glob("nvidia*")):
            args += ["--dev-bind", str(node), str(node)]
        if Path("/dev/dri").exists():
            args += ["--dev-bind", "/dev/dri", "/dev/dri"]
    for hidden in _hidden_directories():
        args += ["--tmpfs", hidden]
    for needed in _paths_to_keep_visible(scratch):
        args += ["--ro-bind", needed, needed]
    for path in read_only:
        if Path(path).is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch)]
    return args


def _kernel_confinement() -> list[str]:
    """What bubblewrap adds to keep the kernel's settings and the other workers' groups out of
    reach. As root, its sandbox's root is the host's (uid 0 maps to 0) with every capability kept
    unless dropped: a program could remount /proc writable or mount a proc of its own and write
    the kernel's settings, since /proc/sys's files are the global root's to write
    (kernel.core_pattern runs a program of its choice as the host's root); so it keeps none, and
    the read-only /proc stays so. Whoever runs it, /sys/fs/cgroup shows every group, the
    reference's among them, and their cgroup.events are readable by all: notifications of the
    reference's freezes run in the reference's context, and registered 400,000 times over in
    epoll they made an exact copy read 7.4x-7.9x (2026-11-29). So the sandbox gets an empty one
    (the host keeps the groups from outside)."""
    args = ["--cap-drop", "ALL"] if os.geteuid() == 0 else []
    if os.path.isdir("/sys/fs/cgroup"):
        args += ["--tmpfs", "/sys/fs/cgroup"]
    return args


def _hidden_directories() -> list[str]:
    """Replaced by empty tmpfs in the sandbox: temporary directories (other evaluations'
    scratch, the host's files) and home directories (credentials, shell history, tokens)."""
    dirs = {"/tmp", "/var/tmp", "/run", "/home", "/root", os.path.expanduser("~")}
    return sorted(d for d in dirs if d not in ("/", "") and os.path.isdir(d) and not os.path.islink(d))


def _paths_to_keep_visible(scratch: Path) -> list[str]:
    """Interpreter and package paths under a hidden directory are bound back, read-only;
    never a directory that contains the evaluation's scratch (it would expose its siblings)."""
    hidden = _hidden_directories()
    scratch_parent = os.path.realpath(scratch.parent)
    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(__file__).resolve().parents[2])}
    wanted.update(p for p in sys.path if p and os.path.isdir(p))
    keep = set()
    for path in wanted:
        for candidate in {path, os.path.realpath(path)}:
            if not any(_is_within(candidate, h) for h in hidden):
                continue
            if _is_within(scratch_parent, candidate):
                continue
            keep.add(candidate)
    # A path inside another kept path is already visible.
    return sorted(p for p in keep if not any(p != q and _is_within(p, q) for q in keep))


def _is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _unshare_user_flags() -> list[str]:
    return [] if os.geteuid() == 0 else ["--user", "--map-root-user"]


@functools.lru_cache(maxsize=None)
def _bubblewrap_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = ["bwrap", "--die-with-parent", "--unshare-all", "--ro-bind", "/", "/",
             "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "true"]
    return _succeeds(probe)


@functools.lru_cache(maxsize=None)
def _unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("setpriv") is None:
        return False
    return _succeeds(_unshare_prefix() + ["true"])


def _succeeds(command: list[str]) -> bool:
    try:
        return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False

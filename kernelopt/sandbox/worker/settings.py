"""The worker's set-up and what it reports of its environment: the CUDA driver probe, torch's
thread pools warmed and tqdm's monitor off before the thread baseline is taken, the global numeric
settings a candidate may flip, and the environment record. Standard library and torch only."""

from __future__ import annotations

def probe_cuda_driver() -> None:
    """On a machine with an NVIDIA driver, a CPU evaluation's candidate may still touch CUDA
    (a CUDA extension's import, torch.cuda.is_available()); the driver then starts a thread of
    its own. Both workers probe at load, so such a thread counts on both sides, not as the candidate's."""
    import torch

    torch.cuda.is_available()


def prepare_process() -> None:
    """What both workers do before the thread baseline is taken and any program code runs."""
    _warm_thread_pools()
    _no_progress_monitor()


def _warm_thread_pools() -> None:
    """Start torch's lazily created CPU thread pools before the thread baseline is taken."""
    import torch

    a = torch.randn(256, 256)
    (a @ a).relu_().sum().item()
    torch.randn(1 << 20).exp_().sum().item()


def _no_progress_monitor() -> None:
    """tqdm starts a monitor thread with its first progress bar, and torch.compile's inductor
    makes one where tqdm is installed: the census would count that thread against an honest
    candidate. With the interval at 0 tqdm starts no monitor. Both workers do it, so the two
    processes stay set up alike; a program that turns the monitor back on owns its thread."""
    try:
        import tqdm
    except ImportError:
        return
    tqdm.tqdm.monitor_interval = 0


def library_settings() -> dict:
    """Global numeric settings a candidate may flip (labelled as a 'library setting')."""
    import torch

    settings = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    }
    return {k: str(v) for k, v in settings.items()}


def environment(device) -> dict:
    import platform

    import torch

    info = {"device": str(device), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "platform": platform.platform(), "device_name": None,
            "driver": None, "allocator": _host_allocator()}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["driver"] = _driver_version()
    else:
        info["device_name"] = platform.processor() or platform.machine()
    return info


def _host_allocator() -> str:
    """Which malloc serves this process: jemalloc when the host preloaded it (timings of CPU
    kernels depend on it, see isolation.allocator_environment), else glibc's."""
    try:
        with open("/proc/self/maps") as maps:
            return "jemalloc" if "libjemalloc" in maps.read() else "glibc"
    except OSError:
        return "unknown"


def _driver_version() -> str | None:
    try:
        import ctypes

        version = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        return f"{version.value // 1000}.{(version.value % 1000) // 10}"
    except OSError:
        return None

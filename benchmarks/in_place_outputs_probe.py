"""Can a trusted process read a worker's outputs where torch put them, with no copy in the window?

On a GPU the thin loop copies each output into the device output slot inside the call's window
(worker/measure.py `_into_slot`), so the keeper can take it after the freeze. For a call that only
moves memory that copy is as large as the call, and a program can skip it: computed straight into
the slot, the loop's copy finds source and target the same and torch does nothing
(`tests/adversarial/hacks/output_computed_in_the_device_slot.py`: 1.83x for an exact ReLU with the
protocol run on the CPU). The way out is to read outputs in place, as the host does on a CPU
through /proc/<pid>/mem: the worker's allocations come from a memory pool the keeper can import.

This probe, for a GPU session, measures whether and at what cost that works on its driver and
torch, in two processes like a worker and the keeper (the child in a PID namespace of its own
where `unshare` can make one, as the sandbox's workers are):

  exporter (the worker): before torch allocates, make a memory pool that can be exported as a
    POSIX file descriptor and set it current for the device; run torch with its
    cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), which takes
    from the current pool; compute a ReLU; check the output came from that pool; export the
    pool (once per worker) and the output's pointer (per call: what would stay in the window).
  importer (the keeper): import the pool, import the pointer, copy the output out, compare, and
    free the import.

Prints one JSON object: each step's time in ms, whether the values matched, and for comparison a
torch ReLU of the same size with each allocator backend. Run on a GPU machine:

    .venv/bin/python benchmarks/in_place_outputs_probe.py [--elements N]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import time

# The device slots' own bindings of the driver (loaded with cuInit, errors named), reused here.
from kernelopt.sandbox.worker.device_memory import _check, _current_context, _Location
from kernelopt.sandbox.worker.device_memory import _cuda as _driver

_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_MEMPOOL_HANDLE = 17  # CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
_RANGE_START = 11  # CU_POINTER_ATTRIBUTE_RANGE_START_ADDR


class _PoolProps(ctypes.Structure):  # CUmemPoolProps (cuda.h, CUDA 12-13): 88 bytes
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int), ("location", _Location),
                ("win32SecurityAttributes", ctypes.c_void_p), ("maxSize", ctypes.c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]


class _ExportData(ctypes.Structure):  # CUmemPoolPtrExportData
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def _timed(step, times: dict, name: str):
    began = time.perf_counter()
    value = step()
    times[name] = round((time.perf_counter() - began) * 1e3, 4)
    return value


class _Pointer:
    """A device pointer as torch.as_tensor takes it (float32 elements)."""

    def __init__(self, pointer: int, elements: int):
        self.__cuda_array_interface__ = {"shape": (elements,), "typestr": "<f4", "data": (pointer, False),
                                         "version": 3, "strides": None, "stream": None}


def exporter(channel_fd: int, elements: int) -> None:
    """The worker's side: the pool first, then torch."""
    times: dict = {}
    channel = socket.socket(fileno=channel_fd)
    driver = _driver()
    _current_context(0)  # the primary context, which torch will use
    device = ctypes.c_int()
    _check(driver.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    props = _PoolProps(allocType=1, handleTypes=_POSIX_FD, location=_Location(1, 0))  # pinned, on device 0
    pool = ctypes.c_void_p()
    _timed(lambda: _check(driver.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(props)), "cuMemPoolCreate"),
           times, "pool_create")
    _check(driver.cuDeviceSetMemPool(device, pool), "cuDeviceSetMemPool")
    import torch

    x = torch.randn(elements, device="cuda")
    out = torch.relu(x)
    torch.cuda.synchronize()
    owner = ctypes.c_void_p()
    _check(driver.cuPointerGetAttribute(ctypes.byref(owner), _MEMPOOL_HANDLE, ctypes.c_uint64(out.data_ptr())),
           "cuPointerGetAttribute(MEMPOOL_HANDLE)")
    start = ctypes.c_uint64()
    _check(driver.cuPointerGetAttribute(ctypes.byref(start), _RANGE_START, ctypes.c_uint64(out.data_ptr())),
           "cuPointerGetAttribute(RANGE_START_ADDR)")
    exported_fd = ctypes.c_int(-1)
    _timed(lambda: _check(driver.cuMemPoolExportToShareableHandle(ctypes.byref(exported_fd), pool, _POSIX_FD,
                                                                  ctypes.c_ulonglong(0)),
                          "cuMemPoolExportToShareableHandle"), times, "pool_export")
    data = _ExportData()

    def export_pointer():
        # What stays in the window, per output: which pool, where the allocation starts, its token.
        _check(driver.cuPointerGetAttribute(ctypes.byref(owner), _MEMPOOL_HANDLE, ctypes.c_uint64(out.data_ptr())),
               "cuPointerGetAttribute")
        _check(driver.cuMemPoolExportPointer(ctypes.byref(data), ctypes.c_uint64(start.value)), "cuMemPoolExportPointer")

    report = {"times_ms": times, "from_our_pool": owner.value == pool.value,
              "offset": out.data_ptr() - start.value, "sum": float(out.double().sum()),
              "allocator": torch.cuda.get_allocator_backend(), "torch": torch.__version__}
    try:  # reported either way: the pool's answer matters even where the export fails
        _timed(export_pointer, times, "pointer_export_first")
        _timed(export_pointer, times, "pointer_export_again")
    except RuntimeError as exc:
        report["pointer_export_error"] = str(exc)
    socket.send_fds(channel, [json.dumps(report).encode() + b"\n" + bytes(data.reserved)], [exported_fd.value])
    channel.recv(1)  # the importer has freed its import: only now may the output go


def importer(elements: int, use_namespace: bool) -> dict:
    """The keeper's side."""
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, current here
    driver = _driver()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    command = [sys.executable, __file__, "--role", "exporter", "--channel-fd", str(theirs.fileno()),
               "--elements", str(elements)]
    namespace = use_namespace and shutil.which("unshare") is not None
    if namespace:
        command = ["unshare", "--pid", "--fork", "--"] + command
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    child = subprocess.Popen(command, pass_fds=(theirs.fileno(),), env=env)
    theirs.close()
    ours.settimeout(30)
    message, fds, _, _ = socket.recv_fds(ours, 1 << 16, 1)
    if not message or not fds:
        child.wait(timeout=30)
        raise RuntimeError(f"the exporter sent nothing (exit {child.returncode})")
    header, token = message[:-64].rstrip(b"\n"), message[-64:]
    report = json.loads(header)
    report["pid_namespace"] = namespace
    times = report["times_ms"]
    if "pointer_export_error" in report:  # nothing to import: say what the exporter found
        os.close(fds[0])
        ours.send(b"d")
        child.wait(timeout=30)
        report["exporter_exit"] = child.returncode
        return report
    pool = ctypes.c_void_p()
    _timed(lambda: _check(driver.cuMemPoolImportFromShareableHandle(ctypes.byref(pool), ctypes.c_void_p(fds[0]),
                                                                    _POSIX_FD, ctypes.c_ulonglong(0)),
                          "cuMemPoolImportFromShareableHandle"), times, "pool_import")
    data = _ExportData()
    ctypes.memmove(ctypes.byref(data), token, 64)
    pointer = ctypes.c_uint64()
    _timed(lambda: _check(driver.cuMemPoolImportPointer(ctypes.byref(pointer), pool, ctypes.byref(data)),
                          "cuMemPoolImportPointer"), times, "pointer_import")
    source = torch.as_tensor(_Pointer(pointer.value + report["offset"], elements), device="cuda")

    def take():
        taken = source.clone()
        torch.cuda.synchronize()
        return taken

    taken = _timed(take, times, "copy_out_first")
    taken = _timed(take, times, "copy_out_again")
    report["values_match"] = abs(float(taken.double().sum()) - report["sum"]) <= 1e-6 * max(1.0, abs(report["sum"]))
    _timed(lambda: _check(driver.cuMemFree_v2(pointer), "cuMemFree"), times, "import_free")
    ours.send(b"d")
    child.wait(timeout=30)
    report["exporter_exit"] = child.returncode
    return report


def allocator_costs(elements: int) -> dict:
    """A torch ReLU of the same size under each allocator backend, in a fresh process each (the
    backend is read once): median ms of 50 calls, events."""
    code = ("import torch,statistics;x=torch.randn({n},device='cuda');ts=[]\n"
            "for _ in range(60):\n"
            " s,e=torch.cuda.Event(enable_timing=True),torch.cuda.Event(enable_timing=True);s.record();"
            "y=torch.relu(x);e.record();e.synchronize();ts.append(s.elapsed_time(e))\n"
            "print(statistics.median(ts[10:]))").format(n=elements)
    costs = {}
    for backend in ("native", "cudaMallocAsync"):
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": f"backend:{backend}"}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
        costs[backend] = float(done.stdout.strip()) if done.returncode == 0 else done.stderr[-300:]
    return costs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", default="importer", choices=["importer", "exporter"])
    parser.add_argument("--channel-fd", type=int)
    parser.add_argument("--elements", type=int, default=64 << 20)
    parser.add_argument("--no-namespace", action="store_true")
    args = parser.parse_args()
    if args.role == "exporter":
        exporter(args.channel_fd, args.elements)
        return
    result: dict = {"elements": args.elements}
    try:
        result["in_place"] = importer(args.elements, not args.no_namespace)
    except Exception as exc:  # noqa: BLE001 - a probe: say what failed
        result["in_place_error"] = f"{type(exc).__name__}: {exc}"
        if not args.no_namespace:  # once more without the PID namespace: which of the two failed
            try:
                result["in_place_without_namespace"] = importer(args.elements, False)
            except Exception as again:  # noqa: BLE001
                result["in_place_without_namespace_error"] = f"{type(again).__name__}: {again}"
    result["relu_ms_by_allocator"] = allocator_costs(args.elements)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""Device memory shared between processes through file descriptors: the call's device slots.

The keeper (sandbox/keeper_process.py, trusted, no program code) allocates a slot and exports
it as a file descriptor; the host passes the descriptor to a worker, which maps the same memory
into its own address space. The keeper writes a call's inputs there while the worker is frozen
and copies its outputs out after it is frozen again (sandbox/device_slots.py), so no per-call
copy of inputs or outputs through host memory happens inside a call's window.

Two kinds, one interface:
- CUDA: the driver's virtual memory management (cuMemCreate with a POSIX file descriptor
  handle, cuMemImportFromShareableHandle, cuMemMap). A descriptor crosses PID namespaces,
  where the legacy cudaIpc handles do not (the workers run in their own).
- HOST: an anonymous file (memfd) mapped with mmap: the same protocol on a CPU, so the
  keeper's exchanges are tested on machines without a GPU (KERNELOPT_DEVICE_SLOTS=host).

Standard library, ctypes and torch only: this module runs inside the sandbox too.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CUDA, HOST = "cuda", "host"
_HOST_GRANULE = 2 << 20


class DeviceMemoryError(RuntimeError):
    """A slot that could not be made, exported or mapped (the driver's error named)."""


class Mapping:
    """One slot as mapped in this process: `tensor()` is a flat uint8 tensor over all of it."""

    def __init__(self, kind: str, size: int, device_index: int, *, pointer: int = 0,
                 host_map: mmap.mmap | None = None, handle: int = 0):
        self.kind, self.size, self.device_index = kind, size, device_index
        self.pointer, self.host_map, self.handle = pointer, host_map, handle
        self.locked_bytes = 0  # how much of a HOST mapping, from its start, is registered with the CUDA driver (page_lock)
        self.lock_refused = False  # the driver refused to register more of it: page_lock asks no more
        self._tensor: torch.Tensor | None = None

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.pointer, False), "version": 3,
                "strides": None, "stream": None}

    def tensor(self) -> torch.Tensor:
        """The whole slot as a flat uint8 tensor (a view: no copy, on the slot's device)."""
        if self._tensor is None:
            import torch

            if self.kind == HOST:
                self._tensor = torch.frombuffer(self.host_map, dtype=torch.uint8, count=self.size)
            else:
                self._tensor = torch.as_tensor(self, device=f"cuda:{self.device_index}")
        return self._tensor

    @property
    def page_locked(self) -> bool:
        return self.locked_bytes > 0

    def close(self) -> None:
        if self.locked_bytes:  # before the unmap: the driver must not keep pages it was given
            _cuda().cuMemHostUnregister(ctypes.c_void_p(self.pointer))
            self.locked_bytes, self.pointer = 0, 0
        self._tensor = None
        if self.kind == HOST:
            if self.host_map is not None:
                try:
                    self.host_map.close()
                except BufferError:  # a view is still alive: the mapping goes with the process
                    pass
            return
        if self.pointer:
            driver = _cuda()
            driver.cuMemUnmap(ctypes.c_uint64(self.pointer), ctypes.c_size_t(self.size))
            driver.cuMemAddressFree(ctypes.c_uint64(self.pointer), ctypes.c_size_t(self.size))
            self.pointer = 0
        if self.handle:
            _cuda().cuMemRelease(ctypes.c_uint64(self.handle))
            self.handle = 0


def rounded(kind: str, size: int, device_index: int = 0) -> int:
    """`size` rounded up to what a slot of this kind is allocated in (at least one granule)."""
    granule = _HOST_GRANULE if kind == HOST else _cuda_granularity(device_index)
    return max(granule, -(-size // granule) * granule)


def allocate(kind: str, size: int, device_index: int = 0) -> tuple[Mapping, int]:
    """A new slot of at least `size` bytes mapped here, and a descriptor that exports it (the
    caller passes it on and closes it)."""
    size = rounded(kind, size, device_index)
    if kind == HOST:
        fd = os.memfd_create("kernelopt-device-slot", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return Mapping(HOST, size, device_index, host_map=mmap.mmap(fd, size)), fd
    _current_context(device_index)
    driver, prop = _cuda(), _allocation_prop(device_index)
    handle = ctypes.c_uint64()
    _check(driver.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0)),
           "cuMemCreate")
    exported = ctypes.c_int(-1)
    _check(driver.cuMemExportToShareableHandle(ctypes.byref(exported), handle, _POSIX_FD, ctypes.c_ulonglong(0)),
           "cuMemExportToShareableHandle")
    return _map_cuda(handle.value, size, device_index), exported.value


def open_slot(kind: str, fd: int, size: int, device_index: int = 0) -> Mapping:
    """Map the slot another process exported as `fd` (closed here once mapped)."""
    try:
        if kind == HOST:
            if os.fstat(fd).st_size < size:
                raise DeviceMemoryError(f"a host slot of {os.fstat(fd).st_size} bytes, not {size}")
            return Mapping(HOST, size, device_index, host_map=mmap.mmap(fd, size))
        driver, handle = _cuda(), ctypes.c_uint64()
        _check(driver.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
               "cuMemImportFromShareableHandle")
        return _map_cuda(handle.value, size, device_index)
    finally:
        os.close(fd)


LOCK_STEP = 64 << 20  # page_lock's granularity: a few registrations as a slot's use grows


def page_lock(mapping: Mapping, device_index: int, nbytes: int) -> bool:
    """Register at least the first `nbytes` of a HOST mapping (the host's shared memory, in the
    keeper) with the CUDA driver, so copies between it and the device run on the copy engines
    straight from it. From pageable memory the driver stages every copy: placing a 4096^2
    matmul's 134 MB of inputs took 42 ms on an H200 (3.2 GB/s), between every two windows.
    Only the part in use is registered, since registering makes every page of it resident and
    unreclaimable, and an input slot is a sparse 4 GiB file: the registration grows (at least
    doubling, in LOCK_STEP steps) as the calls reach further, outside any window. False where
    the driver refuses: what was registered before stays, the copies beyond it stay pageable,
    and the driver is not asked again (every window would pay for its refusal)."""
    if mapping.kind != HOST:
        return False
    if nbytes <= mapping.locked_bytes or mapping.lock_refused:
        return nbytes <= mapping.locked_bytes
    held = mapping.locked_bytes
    want = min(mapping.size, max(-(-nbytes // LOCK_STEP) * LOCK_STEP, 2 * held))
    _current_context(device_index)
    driver = _cuda()
    if held:
        driver.cuMemHostUnregister(ctypes.c_void_p(mapping.pointer))
        mapping.locked_bytes = 0
    pointer = mapping.tensor().data_ptr()
    for size in (want, held):
        if size and driver.cuMemHostRegister_v2(ctypes.c_void_p(pointer), ctypes.c_size_t(size),
                                                ctypes.c_uint(0)) == 0:
            mapping.locked_bytes, mapping.pointer = size, pointer
            break
        mapping.lock_refused = True
    return nbytes <= mapping.locked_bytes


def reset_persisting_l2(device_index: int) -> bool:
    """Return every line of the device's L2 that a context marked persisting (an access policy
    window on a stream, inside the L2 set aside with CU_LIMIT_PERSISTING_L2_CACHE_SIZE) to normal,
    so that the next window, either side's, starts with the whole L2 as the last one left it:
    a program's persisting lines would otherwise hold the set-aside part of L2 through the other
    side's window. False where the driver refuses (a device without persisting L2)."""
    _current_context(device_index)
    return _cuda().cuCtxResetPersistingL2Cache() == 0


# -- the CUDA driver's virtual memory management, through ctypes -------------------------------

_POSIX_FD = ctypes.c_int(1)  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_driver_library = None


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp (cuda.h)
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


def _allocation_prop(device_index: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _Location(1, device_index)  # CU_MEM_LOCATION_TYPE_DEVICE
    return prop


def _cuda():
    global _driver_library
    if _driver_library is None:
        try:
            library = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise DeviceMemoryError(f"the CUDA driver library cannot be loaded ({exc})") from None
        _check(library.cuInit(0), "cuInit")
        _driver_library = library
    return _driver_library


def _current_context(device_index: int) -> None:
    """Make the device's primary context (the one torch uses) current on this thread where no
    context is: the mapping calls act on the current one."""
    driver, context = _cuda(), ctypes.c_void_p()
    _check(driver.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    if context.value:
        return
    device = ctypes.c_int()
    _check(driver.cuDeviceGet(ctypes.byref(device), device_index), "cuDeviceGet")
    _check(driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")


def _cuda_granularity(device_index: int) -> int:
    granule = ctypes.c_size_t()
    prop = _allocation_prop(device_index)
    _check(_cuda().cuMemGetAllocationGranularity(ctypes.byref(granule), ctypes.byref(prop), 0),
           "cuMemGetAllocationGranularity")  # CU_MEM_ALLOC_GRANULARITY_MINIMUM
    return max(int(granule.value), 1)


def _map_cuda(handle: int, size: int, device_index: int) -> Mapping:
    """Reserve an address range, map the allocation there, and make it readable and writable
    from this device. The handle is released by Mapping.close, after the unmap."""
    _current_context(device_index)
    driver, pointer = _cuda(), ctypes.c_uint64()
    _check(driver.cuMemAddressReserve(ctypes.byref(pointer), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                      ctypes.c_uint64(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
    _check(driver.cuMemMap(pointer, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                           ctypes.c_ulonglong(0)), "cuMemMap")
    access = _AccessDesc(_Location(1, device_index), 3)  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    _check(driver.cuMemSetAccess(pointer, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
           "cuMemSetAccess")
    return Mapping(CUDA, size, device_index, pointer=pointer.value, handle=handle)


def _check(result: int, call: str) -> None:
    if result != 0:
        raise DeviceMemoryError(f"{call} failed with CUresult {result}")

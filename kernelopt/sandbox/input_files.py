"""The host's input slots: where it hands a worker one call's inputs.

InputSlot is a memfd the worker inherits. A container gets no descriptors beyond its attached
streams, so that memfd cannot reach it: its slot is FileInputSlot. The host creates a file in
/dev/shm (a tmpfs: its pages are memory, shared with every mapping of the file), sizes it once
(sparse), and the container gets it as a read-only bind mount (`CONTAINER_PATH`); the worker maps it read-only and shared
(worker/main.py, `--inputs-path`), so each call's inputs are views of the host's pages, as under
bubblewrap, and nothing of them travels through the daemon's attach stream inside the window.

Read-only on both counts: the mount (no open for writing, so no truncate, no chmod: EROFS) and
the mapping (PROT_READ). A program that writes into an input in place faults on the page: its
worker dies of SIGSEGV, the candidate's own runtime error (under bubblewrap the slot is
writable and the same write is the input-mutation rule's). The host never maps the file: it
writes and compares with pwrite/pread, so a file truncated anyway (by anything that could reach
it on the host) is extended again by the next write instead of faulting the host with SIGBUS.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import secrets
import warnings

import torch

INPUT_SLOT_BYTES = 4 << 30  # sparse: memory is used only as far as one call's inputs reach
PLACEMENT_WINDOW_BYTES = 32 << 20  # written once up front: where a round's inputs may start
SLOT_DIRECTORY = "/dev/shm"
CONTAINER_PATH = "/kernelopt-inputs"  # where the container sees its slot (its root is read-only)


class InputSlot:
    """Shared memory through which the host hands a worker one call's inputs at a time.

    An anonymous file (memfd), sized once and sealed against resizing before the worker
    inherits it: a candidate that truncated it would otherwise make the host's next write
    fault. The host writes each input set only when the worker is about to use it, and the next
    one only after the worker has answered that call."""

    def __init__(self, role: str, size: int = INPUT_SLOT_BYTES):
        self.name = f"kernelopt-{role}-inputs"  # as /proc/<pid>/maps shows the worker's mapping of it
        self.fd = os.memfd_create(self.name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.size = size
        self._map = mmap.mmap(self.fd, size)
        # The window's pages exist before the worker maps them (it touches them once at start),
        # so moving the inputs within it from round to round costs no page faults in a call.
        window = min(size, PLACEMENT_WINDOW_BYTES)
        self._map[:window] = bytes(window)

    def put(self, packed: bytes, at: int = 0) -> bool:
        """Write one input set at byte `at` of the slot; False when it does not fit."""
        if at < 0 or at + len(packed) > self.size:
            return False
        self._map[at:at + len(packed)] = packed
        return True

    def holds(self, packed: bytes, at: int = 0) -> bool:
        """Whether the slot still holds `packed` at byte `at` (a call did not write its inputs).
        Compared in place: slicing the map copied it first (a 134 MB set: 220 ms a check against
        45, on the 2-core VM), and a memoryview compares item by item."""
        if at < 0 or at + len(packed) > self.size:
            return False
        if not packed:
            return True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # frombuffer warns of read-only buffers; nothing writes here
            slot = torch.frombuffer(self._map, dtype=torch.uint8, count=len(packed), offset=at)
            return bool(torch.equal(slot, torch.frombuffer(packed, dtype=torch.uint8)))

    def close(self) -> None:
        try:
            self._map.close()
            os.close(self.fd)
        except (OSError, BufferError):
            pass


class FileInputSlot:
    """InputSlot's interface (name, size, put, holds, close) over a tmpfs file; `path` is the
    host's, for the container's bind mount. `fd` is the host's own descriptor (never passed)."""

    def __init__(self, role: str, size: int, window: int, uid: int | None = None, gid: int | None = None):
        # The name is unique, so /proc/<pid>/maps finds this slot's mapping by it (the host's
        # path and the container's both end in it); it names the host's pid for remove_orphans.
        self.name = f"kernelopt-{role}-inputs-{os.getpid()}-{secrets.token_hex(6)}"
        self.path = os.path.join(SLOT_DIRECTORY, self.name)
        self.size = size
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
        try:
            if uid is not None and gid is not None and os.getuid() == 0:
                os.fchown(self.fd, 0, gid)  # the container's user reads it through its group, owns nothing
            os.ftruncate(self.fd, size)
            # The placement window's pages exist before the worker maps them (it touches them once
            # at start), so moving the inputs within it costs no page faults in a call.
            self._write_zeros(min(size, window))
        except BaseException:
            self.close()
            raise

    def _write_zeros(self, nbytes: int) -> None:
        chunk = bytes(min(nbytes, 1 << 20))
        for offset in range(0, nbytes, len(chunk) or 1):
            os.pwrite(self.fd, chunk[:nbytes - offset], offset)

    def put(self, packed: bytes, at: int = 0) -> bool:
        """Write one input set at byte `at`; False when it does not fit. A file truncated behind
        the host's back is sized again first (the worker's mapping then reads the new pages)."""
        if at < 0 or at + len(packed) > self.size:
            return False
        try:
            if os.fstat(self.fd).st_size != self.size:
                os.ftruncate(self.fd, self.size)
            view, done = memoryview(packed), 0
            while done < len(packed):
                done += os.pwrite(self.fd, view[done:], at + done)
        except OSError:  # the tmpfs is full (ENOSPC: unlike a memfd, /dev/shm has a size): a frame's blob
            return False
        return True

    def holds(self, packed: bytes, at: int = 0) -> bool:
        """Whether the file still holds `packed` at byte `at` (a short read: it was truncated)."""
        done = 0
        while done < len(packed):  # bytes against bytes: a memoryview would compare item by item
            got = os.pread(self.fd, min(len(packed) - done, 1 << 30), at + done)
            if not got or packed[done:done + len(got)] != got:
                return False
            done += len(got)
        return True

    def unlink(self) -> None:
        """Remove the file's name once the worker has mapped it: its pages live on in the host's
        descriptor and the worker's mapping, and go with them, however the host ends (a name
        left in /dev/shm would hold the placement window's memory). A container whose mount is
        the name loses the mount (the kernel detaches mounts of a name unlinked elsewhere)."""
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.unlink()


def remove_orphans() -> int:
    """Remove slot files whose kernelopt process is gone (killed between making a container's
    slot and its worker's hello, when the name is unlinked). Returns how many."""
    removed = 0
    try:
        names = os.listdir(SLOT_DIRECTORY)
    except OSError:
        return 0
    for name in names:
        parts = name.split("-")
        if len(parts) == 5 and parts[0] == "kernelopt" and parts[2] == "inputs" and parts[3].isdigit() \
                and not os.path.exists(f"/proc/{parts[3]}"):
            try:
                os.unlink(os.path.join(SLOT_DIRECTORY, name))
                removed += 1
            except OSError:
                pass
    return removed


def transport_note(readable: bool) -> str:
    """What a container worker's isolation record says of how its calls' data travel."""
    if readable:
        return "; calls' inputs in a read-only slot, outputs read from the frozen worker's memory"
    return ("; calls' inputs and outputs in frames through the daemon's attach stream, inside the window "
            "(the host cannot read the container's memory)")

"""The reference worker's outbox: shared memory of the host's into which the reference packs
the input sets it makes, so that a set does not cross a pipe.

A 134 MB set (two 4096x4096 float32 matrices) took 270 ms through the reply pipe and a fresh
allocation on the host, more than its own generation (170 ms), on the 2-core VM; copied out of
the outbox it takes about 30 ms. Only the reference worker, which runs no candidate code, ever
maps it; the host reads a request's sets once the worker is frozen, and checks every offset the
reply gives against the outbox's size.

The host makes it (a memfd, sealed against resizing, its pages allocated by the host so they are
charged to the host and not to the worker that writes them) once it knows how large the sets
are, and makes a larger one when a request's sets outgrow it. The worker maps it for each
request only, so its pages are not the worker's resident memory between requests.
"""

from __future__ import annotations

import fcntl
import mmap
import os

from kernelopt.sandbox.worker.transfer import ALIGN  # where the worker starts each set (worker/main.py)

OUTBOX_LIMIT_BYTES = 1 << 30  # larger requests send the sets that do not fit as blobs


class Outbox:
    """One outbox: its descriptor (for the worker) and the host's read-only map of it."""

    def __init__(self, size: int):
        self.fd = os.memfd_create("kernelopt-reference-outbox", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            os.posix_fallocate(self.fd, 0, size)  # the host's pages, not charged to the writer's group
            self._map = mmap.mmap(self.fd, size, prot=mmap.PROT_READ)
        except BaseException:
            os.close(self.fd)
            raise
        self.size = size

    def take(self, at: object, nbytes: object) -> bytes | None:
        """A copy of the set the reply says lies at byte `at` (host-owned: the next request
        writes over the outbox), or None where that is not inside the outbox."""
        if not isinstance(at, int) or not isinstance(nbytes, int) or at < 0 or nbytes < 0 or at + nbytes > self.size:
            return None
        return bytearray(memoryview(self._map)[at:at + nbytes])  # type: ignore[return-value]  # bytes-like, as blobs are

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:
            pass
        os.close(self.fd)


def wanted_bytes(set_bytes: int, count: int) -> int:
    """The outbox size for `count` sets of at most `set_bytes` each, each on a cache line."""
    return count * (set_bytes + ALIGN)

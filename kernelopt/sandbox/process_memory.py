"""A worker process's memory as the host reads it: a call's outputs taken by trusted code from
the frozen process, never from anything that process computes or sends.

The host opens /proc/<pid>/mem once the worker has said hello, before any program code has run
in it: the descriptor holds that process's address space from then on (the kernel checks the
host's right to read it at open, so a program that later makes itself undumpable changes
nothing, and one that execs another program leaves the host reading an address space that is
gone: its reads fail, which is the candidate's verdict). Where the descriptor cannot be opened
(another user's process, a container behind a remote daemon) the worker sends its outputs in
the call's answer instead (commands.FRAME), which costs both sides the same copy.
"""

from __future__ import annotations

import os


class UnreadableMemory(OSError):
    """The address range a worker named cannot be read (not mapped, or the process is gone)."""


class ProcessMemory:
    """Reads of one process's memory, and where its input slot lies in it."""

    def __init__(self, fd: int, slot_ranges: list[tuple[int, int]]):
        self._fd = fd
        self.slot_ranges = slot_ranges

    @classmethod
    def open(cls, pid: int, slot_name: str | None) -> ProcessMemory | None:
        """The memory of process `pid` (None where the host may not read it), with the ranges
        where the shared-memory file `slot_name` is mapped in it."""
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        return cls(fd, mapped_ranges(pid, slot_name) if slot_name else [])

    def read(self, address: int, nbytes: int) -> bytearray:
        """`nbytes` bytes from `address`, into a fresh buffer of the host's."""
        buffer = bytearray(nbytes)
        view = memoryview(buffer)
        done = 0
        while done < nbytes:
            try:
                got = os.preadv(self._fd, [view[done:]], address + done)
            except (OSError, OverflowError) as exc:
                raise UnreadableMemory(f"cannot read {nbytes} bytes at {address:#x}: {exc}") from None
            if got <= 0:
                raise UnreadableMemory(f"cannot read {nbytes} bytes at {address:#x}: the range ends early")
            done += got
        return buffer

    def in_slot(self, start: int, end: int) -> bool:
        """Whether [start, end) overlaps the input slot's mapping (an output that is a view of an input)."""
        return any(start < slot_end and slot_start < end for slot_start, slot_end in self.slot_ranges)

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass


def mapped_ranges(pid: int, name: str) -> list[tuple[int, int]]:
    """Where a file whose mapped name contains `name` lies in process `pid`'s address space."""
    ranges = []
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                if name in line:
                    low, _, high = line.split(" ", 1)[0].partition("-")
                    ranges.append((int(low, 16), int(high, 16)))
    except (OSError, ValueError):
        return []
    return ranges

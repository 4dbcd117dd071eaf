"""Framing of host <-> worker messages: a JSON header line, then raw binary blobs.

A frame is `<json>\n` followed by the blobs whose byte sizes the header lists under "blobs".
Blobs carry tensors saved with torch.save (the host loads them with weights_only=True).
Standard library only: this module runs inside the sandbox.

The channel is a pair of dedicated pipes, not stdin/stdout, so whatever the candidate prints
cannot be mistaken for a message (it can still write to the pipe on purpose; the host treats
every message from a candidate worker as untrusted input).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import time
from collections.abc import Callable, Sequence

PROTOCOL_VERSION = 7
MAX_HEADER_BYTES = 16 << 20
ROOM_CHECKED_ABOVE = 1 << 20  # bytes of blobs in one frame before the reader asks for room
PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged process (fs.pipe-max-size)


class ChannelClosed(EOFError):
    """The other side closed the pipe (for the host: the worker exited)."""


class ChannelTimeout(TimeoutError):
    """No complete frame arrived before the deadline."""


class ProtocolError(ValueError):
    """A frame that does not follow the format (oversized, not JSON, bad sizes)."""


class BlobsTooLarge(ProtocolError):
    """A frame whose blobs, together, are larger than the reader will hold (nothing was read)."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"blobs total {size} bytes, over {limit}")
        self.size, self.limit = size, limit


def pipe() -> tuple[int, int]:
    """A pipe (read end, write end) whose buffer holds PIPE_BYTES where the kernel allows it:
    with the default 64 KiB, a 134 MB blob took 270 ms to cross, with 1 MiB 150 ms (the 2-core
    VM), each refill of the buffer a wake-up of the reader."""
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):  # over the ceiling, or not Linux: the default buffer
        pass
    return read_end, write_end


def encode_header(header: dict, blobs: Sequence[bytes] = ()) -> bytes:
    """A frame's first line: the header, with the sizes of the blobs that follow it."""
    header = dict(header, blobs=[len(b) for b in blobs])
    return json.dumps(header, separators=(",", ":")).encode() + b"\n"


def write_frame(fd: int, header: dict, blobs: Sequence[bytes] = (), deadline: float | None = None) -> None:
    """Write a whole frame: the header line, then each blob as it is (never joined into one
    copy: a reply of input sets is gigabytes). On a non-blocking descriptor, wait for room
    until `deadline` (time.monotonic; ChannelTimeout after it)."""
    for part in (encode_header(header, blobs), *blobs):
        _write_all(fd, memoryview(part).cast("B"), deadline)


def _write_all(fd: int, data: memoryview, deadline: float | None) -> None:
    while data:
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise ChannelTimeout() from None
            select.select([], [fd], [], remaining)
            continue
        data = data[written:]


class FrameReader:
    """Reads frames from a file descriptor, optionally with a deadline (time.monotonic)."""

    def __init__(self, fd: int, max_blob_bytes: int = 1 << 40, room: Callable[[int], int] | None = None):
        self.fd = fd
        self.max_blob_bytes = max_blob_bytes
        self.room = room  # given a frame's blob bytes, how many the reader may take on now
        self._buffer = bytearray()

    def read(self, deadline: float | None = None) -> tuple[dict, list[bytes]]:
        line = self._read_line(deadline)
        try:
            header = json.loads(line)
        except ValueError as exc:
            raise ProtocolError(f"header is not JSON: {line[:200]!r}") from exc
        if not isinstance(header, dict):
            raise ProtocolError("header is not a JSON object")
        sizes = header.get("blobs", [])
        if not isinstance(sizes, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sizes
        ):
            raise ProtocolError("header field 'blobs' must list non-negative sizes")
        total, limit = sum(sizes), self.max_blob_bytes
        if self.room is not None and total > ROOM_CHECKED_ABOVE:  # not in every call's answer
            limit = min(limit, self.room(total))
        if total > limit:
            raise BlobsTooLarge(total, limit)
        blobs = [self._read_exact(size, deadline) for size in sizes]
        return header, blobs

    def _read_line(self, deadline: float | None) -> bytes:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                return line
            if len(self._buffer) > MAX_HEADER_BYTES:
                raise ProtocolError("header line too long")
            self._fill(deadline)

    def _read_exact(self, size: int, deadline: float | None) -> bytes:
        """`size` bytes: what the buffer holds, then read straight into one allocation of the
        blob's size. (Growing the buffer and slicing it held a blob three times over: a 6 GiB
        reply of input sets took 18 GiB of the host's memory.)"""
        if len(self._buffer) >= size:
            data = self._buffer[:size]  # a bytearray of its own, writable as a read blob always is
            del self._buffer[:size]
            return data  # type: ignore[return-value]  # bytes-like
        blob = bytearray(size)
        view = memoryview(blob)
        have = len(self._buffer)
        view[:have] = self._buffer
        self._buffer.clear()
        while have < size:
            self._wait_readable(deadline)
            count = os.readv(self.fd, [view[have:min(size, have + (1 << 24))]])
            if count == 0:
                raise ChannelClosed()
            have += count
        view.release()
        return blob  # type: ignore[return-value]  # bytes-like; a bytes() copy would double it

    def _wait_readable(self, deadline: float | None) -> None:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout()
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                raise ChannelTimeout()

    def _fill(self, deadline: float | None, want: int = 1 << 16) -> None:
        self._wait_readable(deadline)
        chunk = os.read(self.fd, min(max(want, 1 << 16), 1 << 24))
        if not chunk:
            raise ChannelClosed()
        self._buffer += chunk

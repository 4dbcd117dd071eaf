"""Framing of host <-> worker messages: a JSON header line, then raw binary blobs.

A frame is `<json>\n` followed by the blobs whose byte sizes the header lists under "blobs".
Blobs carry tensors saved with torch.save (the host loads them with weights_only=True).
Standard library only: this module runs inside the sandbox.

The channel is a pair of dedicated pipes, not stdin/stdout, so whatever the candidate prints
cannot be mistaken for a message (it can still write to the pipe on purpose; the host treats
every message from a candidate worker as untrusted input).
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Sequence

PROTOCOL_VERSION = 2
MAX_HEADER_BYTES = 16 << 20


class ChannelClosed(EOFError):
    """The other side closed the pipe (for the host: the worker exited)."""


class ChannelTimeout(TimeoutError):
    """No complete frame arrived before the deadline."""


class ProtocolError(ValueError):
    """A frame that does not follow the format (oversized, not JSON, bad sizes)."""


def encode_frame(header: dict, blobs: Sequence[bytes] = ()) -> bytes:
    header = dict(header, blobs=[len(b) for b in blobs])
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + b"".join(blobs)


def write_frame(fd: int, header: dict, blobs: Sequence[bytes] = (), deadline: float | None = None) -> None:
    """Write a whole frame. On a non-blocking descriptor, wait for room until `deadline`
    (time.monotonic; ChannelTimeout after it)."""
    data = memoryview(encode_frame(header, blobs))
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

    def __init__(self, fd: int, max_blob_bytes: int = 1 << 40):
        self.fd = fd
        self.max_blob_bytes = max_blob_bytes
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
        if sum(sizes) > self.max_blob_bytes:
            raise ProtocolError(f"blobs total {sum(sizes)} bytes, over {self.max_blob_bytes}")
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
        while len(self._buffer) < size:
            self._fill(deadline, want=size - len(self._buffer))
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _fill(self, deadline: float | None, want: int = 1 << 16) -> None:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout()
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                raise ChannelTimeout()
        chunk = os.read(self.fd, min(max(want, 1 << 16), 1 << 24))
        if not chunk:
            raise ChannelClosed()
        self._buffer += chunk

"""Server-sent events for the workbench: whatever thread something happens on (an LLM answer
arrives on the LLM pool, a verdict on the evaluation thread), `publish` hands the event to every
open stream on the server's event loop."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator

HEARTBEAT_S = 15.0   # a comment line this often keeps proxies and browsers from closing the stream


class EventHub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = []
        self._sequence = 0
        self._closed = False

    def publish(self, kind: str, payload: dict) -> None:
        with self._lock:
            self._sequence += 1
            event = (self._sequence, kind, payload)
            streams = list(self._streams)
        for loop, queue in streams:
            loop.call_soon_threadsafe(queue.put_nowait, event)

    def close(self) -> None:
        """Ends every open stream (the server is stopping)."""
        with self._lock:
            self._closed = True
            streams, self._streams = self._streams, []
        for loop, queue in streams:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    async def stream(self, first: dict) -> AsyncIterator[bytes]:
        """One client's stream: `first` (the state as it is now) as a "state" event, then every
        event published from here on."""
        queue: asyncio.Queue = asyncio.Queue()
        entry = (asyncio.get_running_loop(), queue)
        with self._lock:
            if self._closed:
                return
            self._streams.append(entry)
        try:
            yield sse(0, "state", first)
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                except asyncio.TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if event is None:
                    return
                yield sse(*event)
        finally:
            with self._lock:
                if entry in self._streams:
                    self._streams.remove(entry)


def sse(sequence: int, kind: str, payload: dict) -> bytes:
    """One event in the text/event-stream format (JSON data holds no raw newline)."""
    return f"id: {sequence}\nevent: {kind}\ndata: {json.dumps(payload)}\n\n".encode()

import os
import time

import pytest

from kernelopt.sandbox.worker import wire


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


def test_round_trip_with_blobs(pipe):
    read_fd, write_fd = pipe
    wire.write_frame(write_fd, {"cmd": "run", "n": 3}, [b"abc", b"", b"\x00\n" * 10])
    wire.write_frame(write_fd, {"second": True})
    reader = wire.FrameReader(read_fd)
    header, blobs = reader.read(time.monotonic() + 5)
    assert header["cmd"] == "run" and header["n"] == 3
    assert blobs == [b"abc", b"", b"\x00\n" * 10]
    assert reader.read(time.monotonic() + 5)[0]["second"] is True


def test_deadline(pipe):
    read_fd, _ = pipe
    with pytest.raises(wire.ChannelTimeout):
        wire.FrameReader(read_fd).read(time.monotonic() + 0.2)


def test_closed_channel(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, b'{"partial": ')
    os.close(write_fd)
    with pytest.raises(wire.ChannelClosed):
        wire.FrameReader(read_fd).read(time.monotonic() + 5)


@pytest.mark.parametrize("raw", [b"not json\n", b"[1, 2]\n", b'{"blobs": [-1]}\n', b'{"blobs": "x"}\n'])
def test_malformed_headers_are_protocol_errors(pipe, raw):
    read_fd, write_fd = pipe
    os.write(write_fd, raw)
    with pytest.raises(wire.ProtocolError):
        wire.FrameReader(read_fd).read(time.monotonic() + 5)


def test_oversized_blobs_are_refused_before_reading(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, b'{"blobs": [1000000]}\n')
    with pytest.raises(wire.ProtocolError, match="over"):
        wire.FrameReader(read_fd, max_blob_bytes=1000).read(time.monotonic() + 5)


def test_a_write_to_a_reader_that_stopped_reading_ends_at_the_deadline(pipe):
    # The host hands inputs to a worker that may hang: its writes must not block forever.
    _, write_fd = pipe
    os.set_blocking(write_fd, False)
    begin = time.monotonic()
    with pytest.raises(wire.ChannelTimeout):
        wire.write_frame(write_fd, {"cmd": "call"}, [b"x" * (4 << 20)], deadline=begin + 0.3)
    assert 0.25 <= time.monotonic() - begin < 5


def test_a_blob_larger_than_a_pipe_read_arrives_whole_and_is_held_once(pipe):
    # Written by a thread while read: the blob crosses the pipe in many partial reads, part of
    # it already buffered with the header. Neither side copies it whole again: a reply of input
    # sets is gigabytes, and the reader used to hold three copies of it.
    import threading
    import tracemalloc

    read_fd, write_fd = pipe
    blob = bytes(range(256)) * (3 << 14)  # 12 MiB
    writer = threading.Thread(target=wire.write_frame, args=(write_fd, {"big": True}, [blob, b"tail"]))
    tracemalloc.start()
    try:
        writer.start()
        header, blobs = wire.FrameReader(read_fd).read(time.monotonic() + 30)
        writer.join()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * len(blob), f"{peak / len(blob):.2f} copies of the blob at the peak"
    assert header["big"] is True and blobs[1] == b"tail"
    assert len(blobs[0]) == len(blob) and blobs[0] == blob

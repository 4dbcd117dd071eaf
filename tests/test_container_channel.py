"""The container worker's channel (kernelopt/sandbox/container_channel.py), on this host: the
listener takes exactly the worker's two connections, in order, and from nothing but the process
it names (a child of the container's init, here of this test), then is gone. The real
container's side: tests/test_docker.py and the docker subset of the corpus."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelopt.sandbox.container_channel import SOCKET_NAME, ChannelListener, ChannelNotConnected

# What the worker does first (worker/main.py's _connect_channel): connect twice, then say which
# connection is which on each.
CONNECT = """
import socket, sys
ends = []
for _ in range(2):
    end = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    end.connect(sys.argv[1])
    ends.append(end)
ends[0].sendall(b"commands from " + sys.argv[2].encode())
ends[1].sendall(b"replies from " + sys.argv[2].encode())
print("connected", flush=True)
sys.stdin.read()  # stay connected until the test is done
"""


def connect(path: str, name: str, via_parent: bool = False) -> subprocess.Popen:
    command = [sys.executable, "-c", CONNECT, path, name]
    if via_parent:  # a grandchild of this test: its parent is the intermediate process
        command = [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])", *command]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def read_some(fd: int) -> bytes:
    with socket.socket(fileno=fd) as end:
        end.settimeout(30)
        return end.recv(100)


def test_the_worker_gets_the_two_connections_in_order_and_then_the_listener_is_gone():
    listener = ChannelListener()
    path = os.path.join(listener.directory, SOCKET_NAME)
    assert os.stat(path).st_mode & 0o777 == 0o600
    worker = connect(path, "worker")
    try:
        commands, replies = listener.accept(os.getpid(), lambda: True, timeout=60)
        assert read_some(commands) == b"commands from worker"
        assert read_some(replies) == b"replies from worker"
        assert not Path(listener.directory).exists(), "nothing can connect again"
        with pytest.raises(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as late:
            late.connect(path)
    finally:
        worker.kill()
        worker.wait()


def test_a_connection_from_anything_but_the_containers_worker_is_refused():
    """The kernel's peer credentials decide, not the order: a process that is not the init's
    child connects first and is dropped; the worker's two connections are the ones taken."""
    listener = ChannelListener()
    path = os.path.join(listener.directory, SOCKET_NAME)
    stranger = connect(path, "stranger", via_parent=True)
    processes = [stranger]
    try:
        assert stranger.stdout.readline() == b"connected\n"  # both its connections wait in the backlog
        processes.append(connect(path, "worker"))
        commands, replies = listener.accept(os.getpid(), lambda: True, timeout=60)
        assert read_some(commands) == b"commands from worker"
        assert read_some(replies) == b"replies from worker"
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_a_worker_that_dies_or_never_connects_ends_the_wait():
    listener = ChannelListener()
    started = time.monotonic()
    with pytest.raises(ChannelNotConnected, match="exited before it connected"):
        listener.accept(os.getpid(), lambda: False, timeout=60)
    assert time.monotonic() - started < 5 and not Path(listener.directory).exists()
    listener = ChannelListener()
    with pytest.raises(ChannelNotConnected, match="did not connect in 0.5 s"):
        listener.accept(os.getpid(), lambda: True, timeout=0.5)
    assert not Path(listener.directory).exists()

"""A container worker's call channel: a Unix socket the host listens on, bind-mounted read-only.

Docker attaches a container's stdin, stdout and stderr and nothing else, and a frame sent through
the attach stream crosses the daemon (the host's socket to dockerd, containerd's shim, the
container's pipes, and back): about 1 ms a call on the 2-core VM, with spikes of several ms
under load, inside the window of every timed call, and more on one side than the other (issue
43: an exact copy read 0.4x-1.0x). So the host listens on a Unix socket in a directory of its
own, which the container gets as a read-only bind mount (`CONTAINER_DIRECTORY`; a socket on a
read-only mount still takes connections). The worker connects twice before anything of the
program is imported (the first connection carries commands, the second replies), and the host
accepts exactly those two, and only from the container's worker (the kernel's peer credentials
name the container's init or a child of it), then closes the listener and removes the directory:
nothing in the container can connect again. From then on a frame crosses one kernel socket, as a
bubblewrap worker's pipe does. The attach stream carries only what the program prints (the log).
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import struct
import tempfile
import time
from collections.abc import Callable

from kernelopt.sandbox import process_tree

CONTAINER_DIRECTORY = "/kernelopt-channel"
SOCKET_NAME = "worker.sock"
CONTAINER_SOCKET = f"{CONTAINER_DIRECTORY}/{SOCKET_NAME}"
_PEER_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MAX_SOCKET_PATH = 107  # sun_path's 108 bytes, less the terminating zero


class ChannelNotConnected(Exception):
    """The container's worker did not connect (it died first, or took longer than allowed)."""


class ChannelListener:
    """The host's listening socket for one container; `directory` is the bind mount's source."""

    def __init__(self, uid: int | None = None, gid: int | None = None):
        self.directory = tempfile.mkdtemp(prefix="kernelopt-channel-", dir=_socket_parent())
        self._listener: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            path = os.path.join(self.directory, SOCKET_NAME)
            self._listener.bind(path)
            self._listener.listen(2)
            if uid is not None and gid is not None and os.getuid() == 0:
                # Only the container's user may connect (the directory is 0700, the socket 0600);
                # the peer check in accept() refuses anyone else of that uid on this host.
                os.chown(self.directory, uid, gid)
                os.chown(path, uid, gid)
            os.chmod(path, 0o600)
        except BaseException:
            self.close()
            raise

    def accept(self, init_pid: int, alive: Callable[[], bool], timeout: float) -> tuple[int, int]:
        """The host's ends of the worker's (command, reply) connections, once it made both.
        Connections from anything but `init_pid` (the container's init) or a child of it are
        closed unread. Raises ChannelNotConnected when `alive()` turns false or `timeout` passes first.
        The listener is closed either way."""
        accepted: list[socket.socket] = []
        deadline = time.monotonic() + timeout
        try:
            while len(accepted) < 2:
                assert self._listener is not None
                ready, _, _ = select.select([self._listener], [], [], 0.25)
                if ready:
                    connection, _ = self._listener.accept()
                    if _from_container(_peer_pid(connection), init_pid):
                        accepted.append(connection)
                    else:
                        connection.close()
                elif not alive():
                    raise ChannelNotConnected("the container's worker exited before it connected")
                elif time.monotonic() > deadline:
                    raise ChannelNotConnected(f"the container's worker did not connect in {timeout:g} s")
        except BaseException:
            for connection in accepted:
                connection.close()
            raise
        finally:
            self.close()
        commands, replies = accepted
        return commands.detach(), replies.detach()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        shutil.rmtree(self.directory, ignore_errors=True)


def _socket_parent() -> str:
    """The temporary directory, where a socket's whole path fits sun_path; else /tmp."""
    parent = tempfile.gettempdir()
    fits = len(parent) + len("/kernelopt-channel-XXXXXXXX/") + len(SOCKET_NAME) <= _MAX_SOCKET_PATH
    return parent if fits else "/tmp"


def _peer_pid(connection: socket.socket) -> int:
    raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size)
    return _PEER_CREDENTIALS.unpack(raw)[0]


def _from_container(pid: int, init_pid: int) -> bool:
    """The worker is the child of the container's init (docker's `--init`), or the init itself
    where a container runs without one."""
    return pid == init_pid or process_tree.parent_pid(pid) == init_pid

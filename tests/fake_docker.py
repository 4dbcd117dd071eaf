"""A stand-in for the Docker daemon, for tests on machines without one: the docker SDK calls
kernelopt makes, answered by running the container's command as a local process.

It proves kernelopt's side of the docker backend (the configuration it asks for, the bind
mounts it relies on, the worker's socket channel, the attach stream it demultiplexes for the
log, the census, kill and cleanup of a container's processes), not docker's isolation: that is what the `docker`-marked tests do
against a real daemon.
"""

from __future__ import annotations

import itertools
import os
import socket
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from kernelopt.sandbox import containers

SANDBOX_DIR = Path(containers.__file__).resolve().parent  # holds the worker package


class NotFound(Exception):
    pass


class FakeImage:
    def __init__(self, labels):
        self.labels = labels


class FakeContainer:
    _ids = itertools.count()

    def __init__(self, daemon, config):
        self.daemon, self.config = daemon, config
        self.id = f"fake{next(self._ids)}"
        self.labels = dict(config.get("labels") or {})
        self.attrs = {"State": {"Status": "created", "Pid": 0, "ExitCode": 0}}
        self.process: subprocess.Popen | None = None
        self._host_side, self._container_side = socket.socketpair()
        self._send_lock = threading.Lock()  # stdout and stderr frames must not interleave
        self.removed = False
        self.pauses = 0

    # -- the SDK's container API --
    def start(self):
        command = [sys.executable if part == "python3" else self._host_path(part)
                   for part in self.config["command"]]
        env = dict(self.config["environment"], PATH=os.environ.get("PATH", "/usr/bin:/bin"))
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, cwd=self.config["working_dir"], env=env,
                                        start_new_session=True)
        self.attrs["State"].update(Status="running", Pid=self.process.pid)
        threading.Thread(target=self._feed_stdin, daemon=True).start()
        outputs = [threading.Thread(target=self._mux, args=(self.process.stdout, 1), daemon=True),
                   threading.Thread(target=self._mux, args=(self.process.stderr, 2), daemon=True)]
        for thread in outputs:
            thread.start()
        threading.Thread(target=self._close_when_done, args=(outputs,), daemon=True).start()

    def _host_path(self, part: str) -> str:
        """A path inside the container as this host sees it: through the bind mounts (the
        channel's socket, the input slot), or the image's worker package as this checkout's."""
        for source, mount in (self.config.get("volumes") or {}).items():
            target = mount["bind"]
            if part == target or part.startswith(target + "/"):
                return source + part[len(target):]
        return part.replace(containers.WORKER_ROOT, str(SANDBOX_DIR))

    def reload(self):
        if self.removed:
            raise NotFound(self.id)
        if self.process is not None and self.process.poll() is not None:
            code = self.process.returncode
            self.attrs["State"].update(Status="exited", ExitCode=128 - code if code < 0 else code)

    def pause(self):  # the daemon freezes the container's cgroup; here, its process group
        self.pauses += 1
        os.killpg(self.process.pid, signal.SIGSTOP)

    def unpause(self):
        os.killpg(self.process.pid, signal.SIGCONT)

    def stats(self, stream=True, one_shot=False):  # the container's CPU time in ns; here, its process's
        assert stream is False and one_shot is True
        usage = time.clock_gettime_ns((~self.process.pid << 3) | 2)
        return {"cpu_stats": {"cpu_usage": {"total_usage": usage}}}

    def remove(self, force=False):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.removed = True
        self.daemon.removed.append(self.id)

    # -- the streams, framed as docker frames them --
    def _feed_stdin(self):
        try:
            while chunk := self._container_side.recv(1 << 16):
                self.process.stdin.write(chunk)
                self.process.stdin.flush()
        except (OSError, ValueError):
            pass
        finally:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def _mux(self, pipe, stream: int):
        while chunk := pipe.read1(1 << 16):
            with self._send_lock:
                try:
                    self._container_side.sendall(struct.pack(">BxxxL", stream, len(chunk)) + chunk)
                except OSError:
                    return

    def _close_when_done(self, outputs):
        for thread in outputs:
            thread.join()
        self.process.wait()
        try:
            self._container_side.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class FakeDaemon:
    """`client` of docker.from_env() with the calls kernelopt makes."""

    def __init__(self, labels=None, info=None):
        self.image_labels = labels if labels is not None else {
            containers.PROTOCOL_LABEL: str(containers.wire.PROTOCOL_VERSION)}
        self.daemon_info = info or {"Runtimes": {"runc": {}, "nvidia": {}}}
        self.created: list[FakeContainer] = []
        self.removed: list[str] = []
        self.containers = self
        self.images = self
        self.api = self

    def ping(self):
        return True

    def info(self):
        return self.daemon_info

    def get(self, name):  # images.get
        return FakeImage(self.image_labels)

    def create(self, **config):  # containers.create
        container = FakeContainer(self, config)
        self.created.append(container)
        return container

    def list(self, all=False, filters=None):  # containers.list
        return [c for c in self.created if not c.removed]

    def attach_socket(self, container_id, params=None):  # api.attach_socket
        return next(c for c in self.created if c.id == container_id)._host_side

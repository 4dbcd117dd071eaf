"""Serving the workbench: uvicorn runs the app (app.py) in a background thread, on a socket bound
when the server is made (a taken port fails before anything is printed), as `kernelopt serve`
does; the caller's thread stays free for Ctrl-C."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterable

import uvicorn

from kernelopt.rewards.service.guard import allowed_hosts
from kernelopt.tune.app import create_app, new_token
from kernelopt.tune.workbench import Workbench

STOP_GRACE_S = 5.0


class TuneServer:
    def __init__(self, workbench: Workbench, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 allow_hosts: Iterable[str] = ()):
        self.workbench = workbench
        self.token = token or new_token()
        self.socket = _listening_socket(host, port)   # OSError: taken port, unknown address
        self.server_address = self.socket.getsockname()
        app = create_app(workbench, self.token, allowed_hosts(host, allow_hosts))
        config = uvicorn.Config(app, http="h11", loop="asyncio", ws="none",
                                lifespan="off", log_config=None, log_level="warning", access_log=False,
                                proxy_headers=False, server_header=False)
        self._uvicorn = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    @property
    def url(self) -> str:
        """The page's address, token included: what to open in a browser."""
        return f"{self.base_url}/?token={self.token}"

    def start(self) -> TuneServer:
        self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [self.socket]},
                                        name="kernelopt-tune-server", daemon=True)
        self._thread.start()
        while not self._uvicorn.started:
            if not self._thread.is_alive():
                raise RuntimeError("the workbench's HTTP server stopped while starting")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Ends the event streams (open pages), the server and the session (its run is stored
        as finished)."""
        self.workbench.events.close()
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_GRACE_S)
            if self._thread.is_alive():
                self._uvicorn.force_exit = True
                self._thread.join(1.0)
        else:
            self.socket.close()
        self.workbench.close()

    def __enter__(self) -> TuneServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)

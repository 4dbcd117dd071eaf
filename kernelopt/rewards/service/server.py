"""Serving a `RewardService`: uvicorn runs the FastAPI app (http.py) in a background thread, on
a socket bound when the server is made, so a taken port fails before anything is printed and
the caller's thread stays free for signals (Ctrl-C, SIGTERM) and for `stop()`."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable

import uvicorn

from kernelopt.rewards.service.core import RewardService
from kernelopt.rewards.service.guard import TOKEN_ENV, allowed_hosts, is_loopback
from kernelopt.rewards.service.http import BODY_TIMEOUT_S, create_app

ANSWER_GRACE_S = 10.0  # after the evaluations end, time to write the answers before giving up on them
KEEP_ALIVE_S = 120  # an idle kept-alive connection is closed after this


class RewardServer:
    """The HTTP server around a RewardService. `start()` serves from a background thread
    (`start_server` does it for you); `serve_forever()` blocks until `shutdown()`; `stop()`
    ends it all, answering every request it accepted."""

    def __init__(self, service: RewardService, host: str = "127.0.0.1", port: int = 0, *,
                 max_body: int = 16 << 20, log_requests: bool = False, token: str | None = None,
                 allow_hosts: Iterable[str] = (), body_timeout: float = BODY_TIMEOUT_S):
        if not token and not is_loopback(host):
            raise ValueError(f"a token is required to listen on {host}, beyond this machine (--token or "
                             f"${TOKEN_ENV})")
        self.service, self.max_body, self.log_requests = service, max_body, log_requests
        self.socket = _listening_socket(host, port)  # OSError: taken port, unknown address
        self.server_address = self.socket.getsockname()
        self.app = create_app(service, max_body=max_body, log_requests=log_requests, token=token or None,
                              allowed=allowed_hosts(host, allow_hosts), body_timeout=body_timeout)
        # Quiet and self-contained: no logging configuration imposed on the host process (the
        # app logs requests itself), no proxy headers trusted, the pure-Python h11 parser.
        config = uvicorn.Config(self.app, http="h11", loop="asyncio", ws="none", lifespan="off", interface="asgi3",
                                log_config=None, log_level="warning", access_log=False, proxy_headers=False,
                                server_header=False, headers=[("server", "kernelopt-reward")],
                                timeout_keep_alive=KEEP_ALIVE_S)
        self._uvicorn = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._shutdown_requested = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def start(self) -> RewardServer:
        """Serve from a background thread; returns once requests are being answered."""
        self._serving_thread()
        return self

    def _serving_thread(self) -> threading.Thread:
        """The thread serving requests, started if it was not, once requests are being answered."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [self.socket]},
                                            name="kernelopt-reward-server", daemon=True)
            self._thread.start()
        thread = self._thread
        while not self._uvicorn.started:
            if not thread.is_alive():
                raise RuntimeError("the reward service's HTTP server stopped while starting")
            time.sleep(0.01)
        return thread

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until `shutdown()` is called from another thread (or a signal handler)."""
        thread = self._serving_thread()
        while not self._shutdown_requested.wait(poll_interval):
            if not thread.is_alive():
                raise RuntimeError("the reward service's HTTP server stopped unexpectedly")

    def shutdown(self) -> None:
        """Stop accepting connections (requests in progress go on) and end `serve_forever()`."""
        self._uvicorn.should_exit = True
        self._shutdown_requested.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop accepting, finish the evaluations in progress (waiting up to `timeout` s for
        each problem's; None: as long as they take) and answer every accepted request, then
        close the Evaluators and the socket."""
        self.shutdown()
        self.service.close(timeout)
        if self._thread is None:
            self.socket.close()
            return
        self._thread.join(ANSWER_GRACE_S)  # uvicorn ends once every open request is answered
        if self._thread.is_alive():
            self._uvicorn.force_exit = True
            self._thread.join(1.0)


def start_server(service: RewardService, host: str = "127.0.0.1", port: int = 0, **kwargs) -> RewardServer:
    """A RewardServer serving in a background thread; port 0 picks a free port (see .url)."""
    return RewardServer(service, host, port, **kwargs).start()


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)  # with SO_REUSEADDR, as http.server had

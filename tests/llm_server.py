"""A scripted OpenAI-compatible HTTP server for tests.

Tests of code that talks to an LLM through the ``openai`` SDK point the client
at this server instead of a real endpoint. The server answers
``POST /v1/chat/completions`` from a script -- a list of :class:`Reply` (or
plain strings) consumed in order, or a callable that builds each reply from the
request -- and records every request body so that tests can assert on what the
code under test sent. Replies can also simulate failures: any HTTP status with an
OpenAI-style error body, extra headers such as ``retry-after``, and a delay
before answering (for timeout and concurrency tests).

Besides the chat endpoint it serves ``GET /v1/models`` and checks the API key and
the requested model the way the real service does (401 and 404 answers with the
usual error bodies), so client-side error handling can be exercised too.

It uses the standard library only (``http.server`` and ``threading``), listens
on 127.0.0.1 only, on an ephemeral port, and serves each connection in its own
daemon thread::

    with ScriptedLLMServer(["first answer", Reply(status=429)]) as server:
        client = openai.OpenAI(base_url=server.url, api_key="test-key", max_retries=0)
        ...
        assert server.answered() == 2
        assert "some text" in server.user_texts()[1]

A reply can also call tools: ``Reply(tool_calls=[ToolCall("evaluate", {"code": ...})])`` answers
in the OpenAI tools format (``message.tool_calls``, ``finish_reason: "tool_calls"``), and
``ScriptedLLMServer(..., tools=False)`` refuses requests with ``tools`` as a server without tool
calling does. Streaming (``"stream": true``) is not supported and is answered with 400.
"""

from __future__ import annotations

import json
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "ScriptedLLMServer", "ToolCall"]

HOST = "127.0.0.1"


@dataclass
class ToolCall:
    """One scripted tool (function) call of an assistant reply. `arguments`: a dict (sent as
    JSON) or a str sent as is, so that tests can send malformed JSON."""

    name: str
    arguments: dict | str = field(default_factory=dict)
    id: str | None = None  # default: call_<n>, numbered across the server's answers


@dataclass
class Reply:
    """One scripted answer to a chat completion request."""

    content: str = ""  # assistant message content
    status: int = 200  # HTTP status; non-200 answers with an OpenAI-style error body
    error_message: str = ""  # for non-200 (default: a sensible text per status)
    prompt_tokens: int | None = None  # default: len of all message contents // 4
    completion_tokens: int | None = None  # default: len(content) // 4 + 1
    delay: float = 0.0  # seconds to sleep before answering
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers
    reasoning_content: str | None = None  # if set, included as message.reasoning_content
    finish_reason: str = "stop"  # "tool_calls" when the reply has tool calls and this is left as is
    tool_calls: list[ToolCall] = field(default_factory=list)  # the assistant's tool calls


ScriptEntry = Reply | str
ScriptFunction = Callable[[dict, int], ScriptEntry]

# status -> (default message, error type, error code), modelled on the real service.
_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Bad request", "invalid_request_error", None),
    401: ("Incorrect API key provided", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to access this resource", "permission_error", None),
    404: ("Not found", "invalid_request_error", "not_found"),
    409: ("Conflict", "invalid_request_error", None),
    422: ("Unprocessable entity", "invalid_request_error", None),
    429: ("Rate limit reached for requests", "rate_limit_exceeded", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request", "server_error", None),
    502: ("Bad gateway", "server_error", None),
    503: ("The server is overloaded or not ready yet", "server_error", None),
    504: ("Gateway timeout", "server_error", None),
}


def error_body(status: int, message: str = "", code: str | None = None) -> dict:
    """An OpenAI-style error body for `status`; `message`/`code` override the defaults."""
    default_message, error_type, default_code = _ERRORS.get(status, ("", "", None))
    if not error_type:
        error_type = "server_error" if status >= 500 else "invalid_request_error"
    if not default_message:
        try:
            default_message = HTTPStatus(status).phrase
        except ValueError:
            default_message = f"HTTP {status}"
    return {
        "error": {
            "message": message or default_message,
            "type": error_type,
            "code": code if code is not None else default_code,
        }
    }


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts with "text"."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, dict)]


def _as_reply(entry: Any) -> Reply:
    if isinstance(entry, Reply):
        return entry
    if isinstance(entry, str):
        return Reply(content=entry)
    raise TypeError(f"a script entry must be a Reply or a str, not {type(entry).__name__}")


class _HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its ScriptedLLMServer and its open connections."""

    daemon_threads = True
    block_on_close = False  # keep-alive connections must not make server_close() wait

    def __init__(self, owner: ScriptedLLMServer):
        self.owner = owner
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__((HOST, 0), _Handler)

    def server_bind(self):
        # HTTPServer.server_bind would also resolve the host name (socket.getfqdn), which can
        # stall on machines with slow DNS; the name is only cosmetic here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        # A client that hung up (e.g. after its own timeout) is not an error of the server.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Routes requests to the owning ScriptedLLMServer. HTTP/1.1 with keep-alive."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the client's delayed ACK
    # would add about 40 ms to every response.
    disable_nagle_algorithm = True
    server: _HTTPServer

    # -- connection bookkeeping, so that stop() can close idle keep-alive connections

    def setup(self):
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self):
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format, *args):
        pass  # keep test output quiet

    # -- routing

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        try:
            body = self._read_body()
        except ValueError as exc:  # no usable Content-Length: cannot keep the connection in sync
            self.close_connection = True
            self.send_json(411, error_body(411, str(exc)))
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        owner = self.server.owner
        if method == "POST" and path == "/v1/chat/completions":
            owner._handle_chat(self, body)
        elif method == "GET" and path == "/v1/models":
            owner._handle_models(self)
        else:
            self.send_json(404, error_body(404, f"Unknown request URL: {method} {self.path}", "unknown_url"))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise ValueError("chunked request bodies are not supported by this test server")
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
        except ValueError:
            raise ValueError(f"bad Content-Length: {length!r}") from None
        return self.rfile.read(n) if n > 0 else b""

    # -- answering

    def authorized(self) -> bool:
        key = self.server.owner.api_key
        return key is None or self.headers.get("Authorization", "") == f"Bearer {key}"

    def send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:  # the client went away (e.g. it timed out first)
            self.close_connection = True


class ScriptedLLMServer:
    """An OpenAI-compatible chat completions server that answers from a script.

    script: a list of :class:`Reply` (or str, meaning ``Reply(content=str)``),
        consumed in order, one per ``POST /v1/chat/completions``; or a callable
        ``(request_body: dict, index: int) -> Reply | str`` called for each request
        (``index`` counts scripted answers from 0).
    models: model ids served by ``GET /v1/models``; a chat request for any other
        model gets 404 ``model_not_found``.
    api_key: the key expected as ``Authorization: Bearer <api_key>`` on every
        route (401 ``invalid_api_key`` otherwise); None disables the check.
    when_exhausted: what happens once a list script is used up: "repeat_last"
        (answer with the last entry again) or "error" (500 "script exhausted").
    models_status: status of ``GET /v1/models``: 200 lists the models; anything
        else answers with an error body of that status (404 simulates a server
        without the endpoint).
    tools: whether requests with ``tools`` are accepted; False answers them with
        400 the way vLLM does without ``--enable-auto-tool-choice`` (a server
        without tool calling).

    Requests rejected before reaching the script (wrong key, unknown model,
    ``stream: true``, missing model) do not consume a script entry, nor does a
    500 "script exhausted"; they are still recorded in :attr:`requests`.
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry] | ScriptFunction,
        *,
        models: Iterable[str] = ("test-model",),
        api_key: str | None = "test-key",
        when_exhausted: str = "repeat_last",
        models_status: int = 200,
        tools: bool = True,
    ):
        if when_exhausted not in ("repeat_last", "error"):
            raise ValueError(f"when_exhausted must be 'repeat_last' or 'error', not {when_exhausted!r}")
        if callable(script):
            self._function: ScriptFunction | None = script
            self._script: list[Reply] = []
        else:
            self._function = None
            self._script = [_as_reply(entry) for entry in script]
        self.models: tuple[str, ...] = tuple(models)
        self.api_key = api_key
        self.when_exhausted = when_exhausted
        self.models_status = models_status
        self.tools = tools
        self._tool_call_ids = 0

        self.requests: list[dict] = []  # every chat request body, in arrival order
        self.model_list_calls = 0  # GET /v1/models that passed the key check
        self.script_errors: list[BaseException] = []  # exceptions raised by a callable script

        self._lock = threading.Lock()
        self._answered = 0  # requests that drew a reply from the script
        self._completion_ids = 0
        self._stopping = threading.Event()  # wakes replies sleeping out their delay
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None

    # -- lifecycle

    @property
    def url(self) -> str:
        """Base URL for the openai client, ``http://127.0.0.1:<port>/v1`` (set by start())."""
        if self._url is None:
            raise RuntimeError("the server has not been started")
        return self._url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def start(self) -> ScriptedLLMServer:
        if self._httpd is not None:
            raise RuntimeError("the server is already running")
        if self._url is not None:
            raise RuntimeError("a stopped ScriptedLLMServer cannot be restarted; create a new one")
        self._httpd = _HTTPServer(self)
        host, port = self._httpd.server_address[:2]
        self._url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"ScriptedLLMServer:{port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open connections and release the port. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()  # ends serve_forever()
        with httpd.connections_lock:
            connections = list(httpd.connections)
        for conn in connections:  # idle keep-alive connections would otherwise linger
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()  # closes the listening socket
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- inspection

    def answered(self) -> int:
        """How many chat requests drew a reply from the script (repeats of the last entry included)."""
        with self._lock:
            return self._answered

    def user_texts(self) -> list[str]:
        """For each recorded chat request, its user and system message contents joined by newlines."""
        with self._lock:
            bodies = list(self.requests)
        return [
            "\n".join(_text_of(m.get("content")) for m in _messages(body) if m.get("role") in ("user", "system"))
            for body in bodies
        ]

    # -- request handling (called from handler threads)

    def _handle_models(self, handler: _Handler) -> None:
        if not handler.authorized():
            handler.send_json(401, error_body(401))
            return
        with self._lock:
            self.model_list_calls += 1
        if self.models_status != 200:
            handler.send_json(self.models_status, error_body(self.models_status))
            return
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "kernelopt-tests"} for m in self.models]
        handler.send_json(200, {"object": "list", "data": data})

    def _handle_chat(self, handler: _Handler, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            handler.send_json(400, error_body(400, f"We could not parse the JSON body of your request: {exc}"))
            return
        if not isinstance(body, dict):
            handler.send_json(400, error_body(400, "The request body must be a JSON object"))
            return
        with self._lock:
            self.requests.append(body)

        if not handler.authorized():
            handler.send_json(401, error_body(401))
            return
        if body.get("stream"):
            handler.send_json(400, error_body(400, "Streaming is not supported by this test server"))
            return
        model = body.get("model")
        if not isinstance(model, str) or not model:
            handler.send_json(400, error_body(400, "You must provide a model parameter", "missing_model"))
            return
        if model not in self.models:
            message = f"The model `{model}` does not exist"
            handler.send_json(404, error_body(404, message, "model_not_found"))
            return

        if body.get("tools") and not self.tools:
            message = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
            handler.send_json(400, error_body(400, message))
            return

        reply = self._next_reply(body)
        if reply is None:
            handler.send_json(500, error_body(500, "script exhausted", "script_exhausted"))
            return
        if reply.delay > 0 and self._stopping.wait(reply.delay):
            handler.close_connection = True  # stopping: drop the request unanswered
            return
        if reply.status != 200:
            handler.send_json(reply.status, error_body(reply.status, reply.error_message), reply.headers)
            return
        handler.send_json(200, self._completion(body, reply), reply.headers)

    def _next_reply(self, body: dict) -> Reply | None:
        """Take the next reply from the script, or None when it is exhausted ("error" mode)."""
        with self._lock:
            index = self._answered
            if self._function is None:
                if index < len(self._script):
                    entry: Reply | None = self._script[index]
                elif self._script and self.when_exhausted == "repeat_last":
                    entry = self._script[-1]
                else:
                    return None
                self._answered += 1
                return entry
            self._answered += 1
        try:  # a callable runs outside the lock so slow scripts do not serialize requests
            return _as_reply(self._function(body, index))
        except Exception as exc:  # surface the failure to the client instead of dropping the connection
            with self._lock:
                self.script_errors.append(exc)
            return Reply(status=500, error_message=f"script callable raised {type(exc).__name__}: {exc}")

    def _completion(self, body: dict, reply: Reply) -> dict:
        messages = _messages(body)
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = sum(len(_text_of(m.get("content"))) for m in messages) // 4
        completion_tokens = reply.completion_tokens
        if completion_tokens is None:
            completion_tokens = len(reply.content) // 4 + 1
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning_content is not None:
            message["reasoning_content"] = reply.reasoning_content
        finish_reason = reply.finish_reason
        with self._lock:
            self._completion_ids += 1
            completion_id = f"chatcmpl-scripted-{self._completion_ids}"
            if reply.tool_calls:
                calls = []
                for call in reply.tool_calls:
                    self._tool_call_ids += 1
                    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
                    calls.append({"id": call.id or f"call_{self._tool_call_ids}", "type": "function",
                                  "function": {"name": call.name, "arguments": arguments}})
                message["tool_calls"] = calls
                message["content"] = reply.content or None
                finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def main(argv: list[str] | None = None) -> None:
    """Serve scripted answers on loopback until interrupted: try `kernelopt optimize`, `runs`,
    `export` and agent-mode `bench` without an LLM endpoint (docs/getting-started.md). Each
    answer is one of the given program files in a ```python block, in turn (the last repeats)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="+", metavar="CANDIDATE.py", help="the answers, in order")
    parser.add_argument("--model", default="scripted", help="the model name it serves (default scripted)")
    parser.add_argument("--api-key", default=None, help="a key it requires (default: none, as a loopback server)")
    args = parser.parse_args(argv)
    answers = [f"Here is a candidate.\n\n```python\n{open(path, encoding='utf-8').read()}```" for path in args.programs]
    with ScriptedLLMServer(answers, models=(args.model,), api_key=args.api_key) as server:
        print(f"serving {len(answers)} scripted answer(s) as model {args.model!r} at {server.url}\n"
              f"  kernelopt optimize PROBLEM.py --base-url {server.url} --model {args.model}\n"
              "(Ctrl-C stops it)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()

"""The HTTP face of a `RewardService`: a FastAPI app whose endpoints are listed once, in
`ENDPOINTS`, with the models that document them at /docs and /openapi.json.

Handlers are async and never block the event loop: decoding and checking a body, and queueing
its jobs, run in the threadpool (a 16 MB body takes a while to parse); the wait for verdicts is
awaited on the loop, so a request waiting in the queue holds no thread and the queue limit, not
a threadpool size, decides when requests are refused. Concurrent requests for one problem meet
in its lane and are judged as one batch.

Every answer is JSON in the service's own shape ({"error", "code"} for errors, never FastAPI's
default bodies), written with `json.dumps` as before, so clients get the same bodies."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from kernelopt.rewards.service.answers import openrlhf_answer
from kernelopt.rewards.service.core import RewardService
from kernelopt.rewards.service.errors import (BadRequest, BodyTimedOut, ClientGone, MethodNotAllowed, NotFound,
                                              ServiceError)
from kernelopt.rewards.service.guard import LOOPBACK_NAMES, RequestGuard
from kernelopt.rewards.service.metrics import Metrics
from kernelopt.rewards.service.schemas import (REQUEST_MODELS, ErrorAnswer, EvaluateAnswer, EvaluateRequest, Health,
                                               OpenRLHFAnswer, OpenRLHFRequest, ProblemListing)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BODY_TIMEOUT_S = 60.0  # a body not received in full by then is answered 408 (a stalled upload holds nothing)


class JSONAnswer(JSONResponse):
    """JSON as `json.dumps` writes it (spaces after separators), the bytes clients of the old
    server got, and strict: a number that is not finite (which no answer should hold: rewards
    and tolerances are checked) is written as null, never as NaN or Infinity, which strict
    parsers refuse."""

    def render(self, content) -> bytes:
        try:
            return json.dumps(content, allow_nan=False).encode()
        except ValueError:
            return json.dumps(finite_or_null(content), allow_nan=False).encode()


def finite_or_null(value):
    """`value` with every NaN and infinity in it replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value


def error_answer(error: ServiceError) -> Response:
    # Closing the connection stops a client still sending a body that will not be read (too
    # large, or refused before reading) instead of reading it only to throw it away.
    headers = {"Connection": "close"}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return JSONAnswer(error.body(), status_code=error.status, headers=headers)


# -- the endpoints ------------------------------------------------------------------------------

async def evaluate(request: Request) -> Response:
    answers = await _judge(request, lambda service, body: [service.parse_evaluate(body)])
    return JSONAnswer(answers[0])


async def openrlhf(request: Request) -> Response:
    # Each sample fails on its own (OpenRLHF turns an error answer into a missing reward that
    # breaks its step); ?extra_logs=0 leaves out the logs OpenRLHF 0.8's HTTP client cannot merge.
    answers = await _judge(request, RewardService.parse_openrlhf, per_sample=True)
    extra_logs = request.query_params.get("extra_logs", "1").lower() not in ("0", "false", "no", "off")
    return JSONAnswer(openrlhf_answer(answers, extra_logs=extra_logs))


async def healthz(request: Request) -> Response:
    return JSONAnswer(_service(request).health())


async def metrics(request: Request) -> Response:
    return Response(_service(request).render_metrics(), media_type=METRICS_CONTENT_TYPE)


async def problems(request: Request) -> Response:
    return JSONAnswer({"problems": _service(request).catalog.listing()})


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    handler: Callable[[Request], Awaitable[Response]]
    summary: str
    request_model: type[BaseModel] | None = None
    answer_model: type[BaseModel] | None = None
    error_codes: tuple[int, ...] = ()
    answer_class: type[Response] = JSONAnswer


_ACCESS_ERRORS = (401, 403)  # no token; a foreign Host or Origin (guard.py)
_JUDGING_ERRORS = (400, *_ACCESS_ERRORS, 408, 415, 422, 429, 500, 503, 504)
ENDPOINTS = (
    Endpoint("POST", "/v1/evaluate", evaluate, "Judge one completion and reward its verdict",
             EvaluateRequest, EvaluateAnswer, _JUDGING_ERRORS),
    Endpoint("POST", "/v1/openrlhf", openrlhf, "OpenRLHF's remote reward model: judge a batch of samples",
             OpenRLHFRequest, OpenRLHFAnswer, _JUDGING_ERRORS),
    Endpoint("POST", "/get_reward", openrlhf, "The same as /v1/openrlhf, at OpenRLHF's usual path",
             OpenRLHFRequest, OpenRLHFAnswer, _JUDGING_ERRORS),
    Endpoint("GET", "/healthz", healthz, "Liveness, queue and evaluators", answer_model=Health, error_codes=(403,)),
    Endpoint("GET", "/metrics", metrics, "Prometheus metrics (text format)", answer_class=PlainTextResponse,
             error_codes=_ACCESS_ERRORS),
    Endpoint("GET", "/v1/problems", problems, "The loaded problem set, with the ids requests may use",
             answer_model=ProblemListing, error_codes=_ACCESS_ERRORS),
)


def create_app(service: RewardService, *, max_body: int = 16 << 20, log_requests: bool = False,
               body_timeout: float = BODY_TIMEOUT_S, allowed: frozenset[str] = LOOPBACK_NAMES,
               token: str | None = None) -> FastAPI:
    """The ASGI app serving `service`; bodies over `max_body` bytes, or not received within
    `body_timeout` seconds, are refused, and so are requests from foreign hosts and origins or
    without the token (guard.py; `allowed`: the Host names answered)."""
    app = FastAPI(title="kernelopt reward service", version="1", redoc_url=None, redirect_slashes=False,
                  description="Verdicts and rewards for LLM-written kernels, for RL trainers (docs/serve.md).")
    app.state.service, app.state.max_body, app.state.body_timeout = service, max_body, body_timeout
    for endpoint in ENDPOINTS:
        _add_route(app, endpoint)
    # Starlette calls a handler only with the exception class it is registered for; its annotation cannot say so.
    app.add_exception_handler(StarletteHTTPException, _routing_error)  # type: ignore[arg-type]
    app.add_middleware(RequestGuard, allowed=allowed, token=token)  # inside AnswerBook: refusals are counted
    app.add_middleware(AnswerBook, metrics=service.metrics, log=log_requests,
                       known_paths=frozenset(route.path for route in app.routes if isinstance(route, Route)))
    # FastAPI's documented way to extend the OpenAPI document is to replace app.openapi.
    app.openapi = functools.partial(_openapi_with_request_models, app, app.openapi)  # type: ignore[method-assign]
    return app


def _add_route(app: FastAPI, endpoint: Endpoint) -> None:
    docs: dict = {"response_model": endpoint.answer_model,
                  "responses": {code: {"model": ErrorAnswer} for code in endpoint.error_codes}}
    if endpoint.request_model is not None:
        docs["openapi_extra"] = {"requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{endpoint.request_model.__name__}"}}}}}
    app.add_api_route(endpoint.path, _answering_errors(endpoint.handler), methods=[endpoint.method],
                      summary=endpoint.summary, response_class=endpoint.answer_class, **docs)


def _answering_errors(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    @functools.wraps(handler)
    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except ServiceError as exc:
            return error_answer(exc)
        except ClientDisconnect:
            return error_answer(ClientGone("the client closed the connection before sending its whole body"))
        except Exception as exc:  # noqa: BLE001 - the client gets an answer, not a dropped connection
            return error_answer(ServiceError(f"internal error: {type(exc).__name__}: {exc}"))

    return route


async def _routing_error(request: Request, exc: StarletteHTTPException) -> Response:
    path = request.url.path
    if exc.status_code == 404:
        endpoints = ", ".join(f"{e.method} {e.path}" for e in ENDPOINTS)
        return error_answer(NotFound(f"no endpoint {path}: the endpoints are {endpoints} (documented at GET /docs)"))
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        return error_answer(MethodNotAllowed(f"{path} takes {allowed}, not {request.method}"))
    error = ServiceError(str(exc.detail))
    error.status = exc.status_code
    return error_answer(error)


def _openapi_with_request_models(app: FastAPI, generate: Callable[[], dict]) -> dict:
    """FastAPI's document, plus the request models: the endpoints read their bodies themselves
    (see requests.py), so FastAPI does not know these models on its own."""
    schema = generate()
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in REQUEST_MODELS:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema
    return schema


# -- bodies and jobs ----------------------------------------------------------------------------

def _service(request: Request) -> RewardService:
    return request.app.state.service


async def _judge(request: Request, parse: Callable[[RewardService, object], list], *,
                 per_sample: bool = False) -> list[dict]:
    """Read, check and queue the request's completions, then await their answers. A client
    that goes away meanwhile (a timeout, a retry) takes its jobs out of the queue: what is
    not being evaluated yet is never judged."""
    service = _service(request)
    arrived = time.monotonic()  # the request's deadline counts from here: reading and parsing are in it
    raw = await _read_body(request, request.app.state.max_body)
    pending = await run_in_threadpool(lambda: service.submit(parse(service, _decode_json(raw)),
                                                             per_sample=per_sample, arrived=arrived))
    answers = asyncio.ensure_future(pending.wait_async())
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait((answers, gone), return_when=asyncio.FIRST_COMPLETED)
        if answers.done():
            return answers.result()
        service.metrics.abandoned(sum(1 for _, job in pending.jobs if job.queued))
        raise ClientGone("the client closed the connection before its answer")
    finally:
        answers.cancel()  # no-ops once done
        gone.cancel()
        pending.withdraw()


async def _client_gone(request: Request) -> None:
    """Returns once the client has disconnected (the body has been read: what the server
    receives next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _read_body(request: Request, max_body: int) -> bytes:
    # A declared length is required so that a body too large is refused before it is read.
    if request.headers.get("transfer-encoding", "").lower() == "chunked":
        raise BadRequest("chunked bodies are not accepted: send Content-Length")
    try:
        length = int(request.headers.get("content-length", ""))
    except ValueError:
        length = -1
    if length < 0:
        raise BadRequest("missing or invalid Content-Length header")
    if length > max_body:
        raise BadRequest(f"the body is too large ({length} bytes; at most {max_body}, see --max-body)")
    try:
        return await asyncio.wait_for(request.body(), request.app.state.body_timeout)
    except asyncio.TimeoutError:
        raise BodyTimedOut(f"the body was not received within {request.app.state.body_timeout:g} s") from None


def _decode_json(raw: bytes):
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite_float)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc or 'nested too deeply'}") from None
    except ValueError as exc:  # NaN, Infinity, or a number too large for a float
        raise BadRequest(f"the body is not valid JSON: {exc}") from None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number (send a finite number)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is too large for a number")
    return value


# -- every answer, counted ------------------------------------------------------------------------

class AnswerBook:
    """ASGI middleware: counts every answer by path and status code for /metrics and, when
    asked, logs it on stderr in the common log format. It also drops a trailing slash from the
    path first, so "/healthz/" is "/healthz" (no redirect), and writes header names
    capitalized, as clients of the old server saw them."""

    def __init__(self, app, *, metrics: Metrics, known_paths: frozenset[str], log: bool):
        self.app, self.metrics, self.known_paths, self.log = app, metrics, known_paths, log

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope["path"] = scope["path"].rstrip("/") or "/"
        label = scope["path"] if scope["path"] in self.known_paths else "other"

        async def counted_send(message):
            if message["type"] == "http.response.start":
                # Counted before a byte is sent: a client that reads its answer and then
                # asks /metrics finds it there.
                self.metrics.request(label, message["status"])
                if self.log:
                    _log_answer(scope, message["status"])
                headers = [(_title_case(name), value) for name, value in message.get("headers", ())]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, counted_send)


def _title_case(name: bytes) -> bytes:
    # Starlette lowercases header names; HTTP does not care, but a client reading headers into
    # a plain dict looks for "Retry-After", as the old server wrote it (h11 keeps the case given).
    return b"-".join(part.capitalize() for part in name.split(b"-"))


def _log_answer(scope, status: int) -> None:
    client = scope.get("client") or ("-", 0)
    target = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    if scope.get("query_string"):
        target += "?" + scope["query_string"].decode("latin-1")
    when = time.strftime("%d/%b/%Y %H:%M:%S")
    print(f'{client[0]} - - [{when}] "{scope["method"]} {target} HTTP/{scope["http_version"]}" {status} -',
          file=sys.stderr, flush=True)

"""The workbench's HTTP app: the page, its JSON API and the event stream, all behind one token.

Every request must carry the token that `kernelopt tune` printed in its URL, as `?token=` or the
`X-Kernelopt-Token` header (the page uses the header for its calls and the query for its event
stream and assets, which cannot send headers); anything else gets 403. So another site open in
the same browser, or another user of the machine, can neither read the session nor act on it.
The page is the package's own files; the Content-Security-Policy lets it load nothing from
elsewhere and run no inline script, and every text the LLM wrote is inserted as text.
"""

from __future__ import annotations

import html
import json
import secrets
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from kernelopt.rewards.service.guard import LOOPBACK_NAMES, host_refusal
from kernelopt.tune.workbench import BadRequest, Busy, Workbench, highlight_css

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"app.js": "text/javascript", "style.css": "text/css"}
MAX_BODY = 2 << 20
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",   # the token is in the URL: never pass it on
    "Cache-Control": "no-store",
}
TOKEN_HELP = "forbidden: open the workbench with the URL that `kernelopt tune` printed (it holds the token)"


def new_token() -> str:
    return secrets.token_urlsafe(24)


def create_app(workbench: Workbench, token: str, allowed: frozenset[str] = LOOPBACK_NAMES) -> FastAPI:
    """The app; `allowed`: the Host names it answers (a DNS name rebound to this machine by a web
    page is refused, as is a request from another site's page: its Origin)."""
    app = FastAPI(title="kernelopt tune", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def guarded(request: Request, call_next):
        refused = host_refusal(request.headers, allowed)
        if refused is not None:
            return JSONResponse({"error": refused}, status_code=403, headers=SECURITY_HEADERS)
        given = request.headers.get("x-kernelopt-token") or request.query_params.get("token") or ""
        if not secrets.compare_digest(given.encode(), token.encode()):
            return Response(TOKEN_HELP, status_code=403, media_type="text/plain", headers=SECURITY_HEADERS)
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.get("/")
    async def page() -> Response:
        text = (STATIC / "index.html").read_text(encoding="utf-8").replace("{{TOKEN}}", html.escape(token))
        return Response(text, media_type="text/html; charset=utf-8")

    @app.get("/static/{name}")
    async def asset(name: str) -> Response:
        if name == "highlight.css":
            return Response(highlight_css(), media_type="text/css")
        if name not in ASSETS:
            return error(404, f"no asset {name!r}")
        return Response((STATIC / name).read_bytes(), media_type=ASSETS[name])

    @app.get("/api/state")
    async def state() -> JSONResponse:
        return JSONResponse(workbench.state())

    @app.get("/api/candidates/{number}")
    async def candidate(number: int) -> Response:
        return answer(lambda: workbench.detail(number))

    @app.get("/api/diff")
    async def diff(old: str, new: str) -> Response:
        return answer(lambda: workbench.diff(old, new))

    @app.get("/api/events")
    async def events() -> StreamingResponse:
        return StreamingResponse(workbench.events.stream(workbench.state()), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    @app.post("/api/ask")
    async def ask(request: Request) -> Response:
        body = await json_body(request)
        return answer(lambda: workbench.ask(body.get("parent"), body.get("hint"), body.get("n", 1)), 202)

    @app.post("/api/submit")
    async def submit(request: Request) -> Response:
        body = await json_body(request)
        return answer(lambda: workbench.submit(body.get("parent"), body.get("code")), 202)

    @app.post("/api/run")
    async def run(request: Request) -> Response:
        body = await json_body(request)
        return answer(lambda: workbench.run(body.get("strategy"), body.get("calls")), 202)

    @app.post("/api/stop")
    async def stop() -> Response:
        return answer(workbench.stop, 202)

    @app.post("/api/open-spot")
    async def open_spot(request: Request) -> Response:
        body = await json_body(request)
        return answer(lambda: workbench.open_spot(body.get("module")))

    @app.post("/api/accept")
    async def accept(request: Request) -> Response:
        body = await json_body(request)
        return answer(lambda: workbench.accept(body.get("number"), body.get("path"), body.get("overwrite", False),
                                               body.get("create_dirs", False)))

    @app.exception_handler(RequestValidationError)
    async def bad_parameters(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in exc.errors())
        return error(400, f"bad parameters: {problems}")

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, exc: BadRequest) -> Response:
        return error(409 if isinstance(exc, Busy) else 400, str(exc))

    return app


def answer(action, status: int = 200) -> Response:
    """The action's result as JSON; a BadRequest as a 400 (409 when busy) with its message."""
    try:
        result = action()
    except BadRequest as exc:
        return error(409 if isinstance(exc, Busy) else 400, str(exc))
    return JSONResponse(result if result is not None else {"ok": True}, status_code=status)


def _not_a_number(name: str):
    raise ValueError(f"{name} is not a JSON number")


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def json_body(request: Request) -> dict:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadRequest(f"the request is too large ({len(raw)} bytes; at most {MAX_BODY})")
    try:
        body = json.loads(raw or b"{}", parse_constant=_not_a_number)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"the request body is not JSON: {exc or 'nested too deeply'}") from None
    except ValueError as exc:  # NaN, Infinity, an integer of thousands of digits
        raise BadRequest(f"the request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body

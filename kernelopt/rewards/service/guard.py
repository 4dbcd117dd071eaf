"""Who may talk to the service: requests are refused, before their body is read, when a web page
could have sent them or when they lack the operator's token.

- `Host` must be a loopback name, the address the server is bound to, or a name the operator
  listed (`--allow-host`): a DNS name rebound to 127.0.0.1 by a web page is refused (403).
- `Origin`, when present (browsers send it), must be the service's own (`http://` + the Host):
  any other site's page is refused (403), `Origin: null` included.
- A POST's body must be declared `application/json` (415): a page can send a `text/plain`
  body across sites without asking, never an `application/json` one.
- With a token (`--token` / KERNELOPT_SERVE_TOKEN, required when bound beyond loopback), every
  path but /healthz needs `Authorization: Bearer TOKEN` (401).

The checks are pure functions, shared with `kernelopt tune`, and `RequestGuard` applies them to
the service as ASGI middleware."""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Iterable, Mapping

from starlette.datastructures import Headers

from kernelopt.rewards.service.errors import Forbidden, ServiceError, Unauthorized, UnsupportedMediaType

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
TOKEN_ENV = "KERNELOPT_SERVE_TOKEN"
OPEN_PATHS = frozenset({"/healthz"})  # liveness probes need no token


def is_loopback(host: str) -> bool:
    """Whether a bind address or Host name stays on this machine."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str | None:
    """The name in a Host header ("example:8321", "[::1]:8321", "example"), lower-cased;
    None when it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        return name if bracket and (not rest or (rest[0] == ":" and rest[1:].isdigit())) else None
    name, colon, port = value.partition(":")
    if not name or (colon and not port.isdigit()) or any(c in name for c in "/@ \\"):
        return None
    return name


def allowed_hosts(bound: str, listed: Iterable[str] = ()) -> frozenset[str]:
    """The Host names a server bound to `bound` answers: loopback names, the bound address
    itself unless it is a wildcard (0.0.0.0, ::), and the names the operator listed."""
    names = set(LOOPBACK_NAMES) | {name.strip().strip("[]").lower() for name in listed if name.strip()}
    bound = bound.strip("[]").lower()
    if bound not in ("", "0.0.0.0", "::"):
        names.add(bound)
    return frozenset(names)


def host_refusal(headers: Mapping[str, str], allowed: frozenset[str]) -> str | None:
    """Why the request's Host (and Origin) show it may come from a foreign web page; None if not."""
    raw = headers.get("host")
    name = host_name(raw) if raw else None
    if raw is None or name is None:
        return "a Host header naming this server is required"
    if name not in allowed and not name.endswith(".localhost"):
        return (f"Host {name!r} is not one this server answers to (loopback names, its own address, and "
                "those listed with --allow-host): a DNS name pointed at this machine by a web page is refused")
    origin = headers.get("origin")
    if origin is not None and origin.strip().lower() != f"http://{raw.strip().lower()}":
        return f"Origin {origin[:100]!r} is not this server's: requests from other sites' pages are refused"
    return None


def token_matches(headers: Mapping[str, str], token: str) -> bool:
    scheme, _, given = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def refusal(method: str, path: str, headers: Mapping[str, str], allowed: frozenset[str],
            token: str | None) -> ServiceError | None:
    """The error answering a request the service must not read; None when it may."""
    reason = host_refusal(headers, allowed)
    if reason is not None:
        return Forbidden(reason)
    if token is not None and path not in OPEN_PATHS and not token_matches(headers, token):
        return Unauthorized("this service needs its token: send the header Authorization: Bearer TOKEN (the "
                            f"value of --token or ${TOKEN_ENV} where it was started)")
    if method == "POST":
        media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != "application/json":
            return UnsupportedMediaType(f"the body must be sent as Content-Type: application/json, not "
                                        f"{media_type or 'without one'!r}")
    return None


class RequestGuard:
    """ASGI middleware refusing, with the service's own error answers, what `refusal` refuses."""

    def __init__(self, app, *, allowed: frozenset[str], token: str | None):
        self.app, self.allowed, self.token = app, allowed, token

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            error = refusal(scope["method"], scope["path"], Headers(scope=scope), self.allowed, self.token)
            if error is not None:
                body = json.dumps(error.body()).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                           (b"connection", b"close")]
                if isinstance(error, Unauthorized):
                    headers.append((b"www-authenticate", b"Bearer"))
                await send({"type": "http.response.start", "status": error.status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

"""The service's error answers: each exception is one HTTP status and one error kind, so the code
that finds a problem also decides what the client is told."""

from __future__ import annotations


class ServiceError(Exception):
    """A request that gets an error answer instead of a verdict."""

    status = 500
    kind = "internal_error"

    def __init__(self, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.message, self.retry_after = message, retry_after

    def body(self) -> dict:
        body: dict[str, str | int] = {"error": self.message, "code": self.kind}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        return body


class BadRequest(ServiceError):
    status, kind = 400, "bad_request"


class NotFound(ServiceError):
    status, kind = 404, "not_found"


class MethodNotAllowed(ServiceError):
    status, kind = 405, "method_not_allowed"


class Forbidden(ServiceError):
    status, kind = 403, "forbidden"


class Unauthorized(ServiceError):
    status, kind = 401, "unauthorized"


class BodyTimedOut(ServiceError):
    status, kind = 408, "body_timeout"


class UnsupportedMediaType(ServiceError):
    status, kind = 415, "unsupported_media_type"


class ClientGone(ServiceError):
    """The client closed its connection before its request was read, or before its answer:
    nobody reads the answer; it is counted under its own code (499, as nginx does), apart from
    the server's errors."""

    status, kind = 499, "client_disconnected"


class ReferenceFailed(ServiceError):
    status, kind = 422, "problem_error"


class Overloaded(ServiceError):
    status, kind = 429, "overloaded"


class ShuttingDown(ServiceError):
    status, kind = 503, "shutting_down"


class RequestTimedOut(ServiceError):
    status, kind = 504, "timeout"


def as_service_error(exc: BaseException) -> ServiceError:
    """What an exception raised while evaluating means for the requests of that batch."""
    from kernelopt.kernelbench import ProblemError
    from kernelopt.sandbox.process import SandboxError

    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, ProblemError):
        return ReferenceFailed(f"the reference program failed, so no candidate can be judged: {exc}")
    if isinstance(exc, SandboxError):
        return ServiceError(f"the sandbox failed (see `kernelopt doctor`): {exc}")
    return ServiceError(f"evaluation failed: {type(exc).__name__}: {exc}")

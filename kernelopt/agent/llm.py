"""The LLM client: chat completions against any OpenAI-compatible endpoint.

One job: turn a request (a dict in the Chat Completions format) into a `Completion`, with
retries on transient failures and a concurrency limit. Caching and recording are the run
store's job (`store.py`); the engine decides when to call.

Failure classes, because they need different handling:
- transient (429, 5xx, timeouts, connection errors): retried with exponential backoff, honouring
  Retry-After; after the last attempt the call fails with `LLMCallError` and the run goes on;
- per-call (the prompt exceeds the context window): `LLMCallError` at once, the run goes on;
- configuration (bad key, unknown model, a request the endpoint refuses): `LLMConfigError`,
  which stops the run, because every further call would fail the same way.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers (vLLM, SGLang, Ollama) accept any key; the SDK insists on a non-empty one.
LOCAL_PLACEHOLDER_KEY = "no-key-needed"

TRANSIENT_ERRORS = (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError,
                    openai.InternalServerError)


class LLMConfigError(Exception):
    """The endpoint cannot be used as configured; the message says how to fix it."""


class LLMCallError(Exception):
    """One call failed for good (after retries where they make sense); the run goes on."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6


def load_price_table(path: str) -> dict[str, Price]:
    """A JSON file mapping model names to [input, output] dollars per million tokens, e.g.
    {"gpt-4o-mini": [0.15, 0.6]}. kernelopt ships no prices: they change, and a wrong one
    would make cost budgets lie."""
    try:
        table = json.loads(open(path, encoding="utf-8").read())
        return {str(model): Price(float(pair[0]), float(pair[1])) for model, pair in table.items()}
    except (OSError, ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        raise LLMConfigError(
            f"price table {path}: {exc}; expected a JSON object like {{\"model\": [input, output]}} "
            "in dollars per million tokens") from exc


@dataclass
class LLMSettings:
    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None  # reasoning models take this instead of max_tokens
    reasoning_effort: str | None = None
    timeout: float = 600.0                    # seconds per attempt
    max_attempts: int = 6
    backoff_initial: float = 1.0              # seconds; doubles per attempt
    backoff_max: float = 60.0
    concurrency: int = 4
    price: Price | None = None

    def request(self, messages: list[dict]) -> dict:
        """The full request body: every field that can change the answer (the cache key)."""
        body: dict = {"model": self.model, "messages": messages}
        optional = {"temperature": self.temperature, "top_p": self.top_p,
                    "max_tokens": self.max_tokens,
                    "max_completion_tokens": self.max_completion_tokens,
                    "reasoning_effort": self.reasoning_effort}
        body.update({k: v for k, v in optional.items() if v is not None})
        return body


def request_key(request: dict) -> str:
    """Content hash of the full request (model, messages, sampling parameters): the key of the
    response cache and of a run's replay. The endpoint's URL is not part of it, so a run can be
    resumed against a server that moved."""
    blob = json.dumps(request, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def is_local_url(url: str) -> bool:
    """Loopback or private-network hosts: self-hosted servers that need no real key."""
    host = urlparse(url).hostname or ""
    if host in ("localhost",) or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def resolve_endpoint(base_url: str | None, api_key_env: str = "OPENAI_API_KEY") -> tuple[str, str | None, bool]:
    """(base URL, key, configured?) from the flag, then OPENAI_BASE_URL, then OpenAI's default.
    "configured" is False when neither a URL nor a key was given anywhere."""
    url = base_url or os.environ.get("OPENAI_BASE_URL") or ""
    key = os.environ.get(api_key_env) or None
    configured = bool(url or key)
    return (url or DEFAULT_BASE_URL), key, configured


@dataclass
class Completion:
    content: str
    reasoning: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost: float | None
    finish_reason: str | None
    attempts: int
    response: dict = field(default_factory=dict)


class LLMClient:
    def __init__(self, settings: LLMSettings):
        self.settings = settings
        key = settings.api_key
        if not key:
            if not is_local_url(settings.base_url):
                raise LLMConfigError(
                    f"no API key: set {settings.api_key_env} (or name another variable with "
                    f"--api-key-env) for {settings.base_url}. Local servers (vLLM, Ollama) need "
                    "none: point --base-url at them, e.g. http://localhost:8000/v1")
            key = LOCAL_PLACEHOLDER_KEY
        # Retries are ours (tenacity), so the SDK's own are off: one policy, one place.
        self._client = openai.OpenAI(base_url=settings.base_url, api_key=key,
                                     timeout=settings.timeout, max_retries=0)
        self._slots = threading.BoundedSemaphore(max(1, settings.concurrency))

    def check(self, timeout: float = 20.0) -> list[str]:
        """Fails fast, before any work, on an unreachable endpoint, a rejected key or a model the
        endpoint does not serve. Returns the served model names (empty when not listed)."""
        url = self.settings.base_url
        try:
            page = self._client.with_options(timeout=timeout).models.list()
            served = [m.id for m in page.data if getattr(m, "id", None)]
        except openai.APIConnectionError as exc:
            raise LLMConfigError(
                f"cannot reach the LLM endpoint at {url} ({_reason(exc)}): is the server running? "
                "Set --base-url or OPENAI_BASE_URL to an OpenAI-compatible /v1 URL") from exc
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise LLMConfigError(
                f"the endpoint at {url} rejected the API key from ${self.settings.api_key_env} "
                f"({exc.status_code}: {_error_text(exc)})") from exc
        except (openai.APIStatusError, openai.APIResponseValidationError, AttributeError, TypeError):
            return []  # no model listing here (404, odd payloads): the first call will tell
        if served and self.settings.model not in served:
            shown = ", ".join(sorted(served)[:20]) + (" ..." if len(served) > 20 else "")
            raise LLMConfigError(f"unknown model {self.settings.model!r} at {url}; it serves: {shown}")
        return served

    def complete(self, request: dict) -> Completion:
        """One chat completion, retried on transient failures."""
        with self._slots:
            attempts = 0
            retrying = Retrying(stop=stop_after_attempt(self.settings.max_attempts),
                                retry=retry_if_exception(lambda e: isinstance(e, TRANSIENT_ERRORS)),
                                wait=self._wait, reraise=True)
            started = time.monotonic()
            try:
                for attempt in retrying:
                    with attempt:
                        attempts += 1
                        started = time.monotonic()
                        response = self._client.chat.completions.create(**request)
            except TRANSIENT_ERRORS as exc:
                raise LLMCallError(f"gave up after {attempts} attempts: {_describe(exc)}") from exc
            except openai.BadRequestError as exc:
                if _is_context_overflow(exc):
                    raise LLMCallError(f"the prompt does not fit the model's context: {_error_text(exc)}") from exc
                raise LLMConfigError(f"the endpoint refused the request (400): {_error_text(exc)}") from exc
            except openai.NotFoundError as exc:
                raise LLMConfigError(
                    f"model {request.get('model')!r} not found at {self.settings.base_url}: "
                    f"{_error_text(exc)}") from exc
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                raise LLMConfigError(
                    f"the endpoint rejected the API key ({exc.status_code}): {_error_text(exc)}") from exc
            except openai.APIStatusError as exc:
                raise LLMCallError(_describe(exc)) from exc
            except openai.APIResponseValidationError as exc:
                raise LLMCallError(f"the endpoint's answer is not a chat completion: {exc}") from exc
            latency = time.monotonic() - started
        return self._completion(response, latency, attempts)

    def _completion(self, response, latency: float, attempts: int) -> Completion:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMCallError("the endpoint answered without choices")
        message = choices[0].message
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        price = self.settings.price
        reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
        return Completion(
            content=message.content or "", reasoning=reasoning if isinstance(reasoning, str) else None,
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, latency_s=latency,
            cost=price.cost(prompt_tokens, completion_tokens) if price else None,
            finish_reason=choices[0].finish_reason, attempts=attempts,
            response=response.model_dump(mode="json") if hasattr(response, "model_dump") else {})

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff, at least what the server's Retry-After asks for."""
        backoff = min(self.settings.backoff_max,
                      self.settings.backoff_initial * 2 ** (state.attempt_number - 1))
        exc = state.outcome.exception() if state.outcome else None
        response = getattr(exc, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after is None:
            return backoff
        try:
            return max(backoff, min(float(retry_after), self.settings.backoff_max))
        except (TypeError, ValueError):
            return backoff


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    inner = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
    return str(inner.get("message") or body.get("message") or exc.message)


def _is_context_overflow(exc: openai.BadRequestError) -> bool:
    text = (_error_text(exc) + " " + str(getattr(exc, "code", "") or "")).lower()
    return any(s in text for s in ("context_length", "context length", "maximum context",
                                   "too many tokens", "prompt is too long"))


def _reason(exc: Exception) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)


def _describe(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"{exc.status_code}: {_error_text(exc)}"
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return f"connection failed ({_reason(exc)})"
    return str(exc)

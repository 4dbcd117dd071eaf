"""LLMClient driven through the real openai SDK against the scripted loopback server."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from llm_server import Reply, ScriptedLLMServer

from kernelopt.agent.llm import (
    DEFAULT_BASE_URL,
    LLMCallError,
    LLMClient,
    LLMConfigError,
    LLMSettings,
    Price,
    is_local_url,
    request_key,
    resolve_endpoint,
)

MODEL = "test-model"
KEY = "test-key"
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "write a kernel"}]

_clients: list[LLMClient] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _clients:
        _clients.pop()._client.close()


def make_client(server: ScriptedLLMServer | None = None, **overrides) -> LLMClient:
    settings = dict(model=MODEL, api_key=KEY, backoff_initial=0.01, backoff_max=1.0, timeout=10.0)
    if server is not None:
        settings["base_url"] = server.url
    settings.update(overrides)
    client = LLMClient(LLMSettings(**settings))
    _clients.append(client)
    return client


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# plain completions ---------------------------------------------------------------------------


def test_plain_completion_reports_content_usage_latency_and_cost():
    price = Price(input_per_mtok=2.5, output_per_mtok=10.0)
    reply = Reply(content="```python\nprint(1)\n```", prompt_tokens=1200, completion_tokens=345,
                  reasoning_content="thinking...", finish_reason="length")
    with ScriptedLLMServer([reply]) as server:
        client = make_client(server, price=price)
        completion = client.complete(client.settings.request(MESSAGES))

    assert completion.content == "```python\nprint(1)\n```"
    assert completion.reasoning == "thinking..."
    assert completion.prompt_tokens == 1200
    assert completion.completion_tokens == 345
    assert completion.finish_reason == "length"
    assert completion.latency_s > 0
    assert completion.attempts == 1
    assert completion.cost == pytest.approx((1200 * 2.5 + 345 * 10.0) / 1e6)
    assert completion.response["choices"][0]["message"]["content"] == completion.content
    assert completion.response["usage"]["prompt_tokens"] == 1200
    assert len(server.requests) == 1
    assert server.requests[0]["messages"] == MESSAGES


def test_price_cost_formula():
    price = Price(input_per_mtok=3.0, output_per_mtok=15.0)
    assert price.cost(1_000_000, 0) == pytest.approx(3.0)
    assert price.cost(0, 1_000_000) == pytest.approx(15.0)
    assert price.cost(2000, 500) == pytest.approx((2000 * 3.0 + 500 * 15.0) / 1e6)
    assert price.cost(0, 0) == 0


def test_cost_is_none_without_a_price():
    with ScriptedLLMServer([Reply(content="hi", prompt_tokens=10, completion_tokens=5)]) as server:
        client = make_client(server)
        completion = client.complete(client.settings.request(MESSAGES))
    assert completion.cost is None
    assert (completion.prompt_tokens, completion.completion_tokens) == (10, 5)
    assert completion.reasoning is None


# retries ---------------------------------------------------------------------------------------


def test_transient_failures_are_retried_until_success():
    script = [Reply(status=429), Reply(status=500), Reply(status=503), Reply(content="finally")]
    with ScriptedLLMServer(script, when_exhausted="error") as server:
        client = make_client(server, backoff_initial=0.01)
        completion = client.complete(client.settings.request(MESSAGES))
        assert completion.content == "finally"
        assert completion.attempts == 4
        assert len(server.requests) == 4
        assert server.answered() == 4
        # every retry sent the identical request
        assert all(r == server.requests[0] for r in server.requests)


def test_retry_after_header_is_honoured_over_a_short_backoff():
    script = [Reply(status=429, headers={"retry-after": "0.3"}), Reply(content="ok")]
    with ScriptedLLMServer(script) as server:
        client = make_client(server, backoff_initial=0.01)
        started = time.monotonic()
        completion = client.complete(client.settings.request(MESSAGES))
        elapsed = time.monotonic() - started
    assert completion.content == "ok"
    assert completion.attempts == 2
    assert elapsed >= 0.28
    assert elapsed < 5


def test_without_retry_after_the_wait_is_the_short_backoff():
    script = [Reply(status=429), Reply(content="ok")]
    with ScriptedLLMServer(script) as server:
        client = make_client(server, backoff_initial=0.01)
        started = time.monotonic()
        client.complete(client.settings.request(MESSAGES))
        elapsed = time.monotonic() - started
    assert elapsed < 0.5  # backoff_initial (0.01 s), not a default second


def test_gives_up_after_max_attempts():
    with ScriptedLLMServer([Reply(status=500)]) as server:
        client = make_client(server, max_attempts=3)
        with pytest.raises(LLMCallError, match="3 attempts") as info:
            client.complete(client.settings.request(MESSAGES))
        assert len(server.requests) == 3
    assert "500" in str(info.value)


def test_retry_after_is_capped_by_backoff_max():
    script = [Reply(status=503, headers={"retry-after": "30"}), Reply(content="ok")]
    with ScriptedLLMServer(script) as server:
        client = make_client(server, backoff_initial=0.01, backoff_max=0.2)
        started = time.monotonic()
        completion = client.complete(client.settings.request(MESSAGES))
        elapsed = time.monotonic() - started
    assert completion.attempts == 2
    assert 0.18 <= elapsed < 2


def test_timeouts_are_retried_then_reported():
    with ScriptedLLMServer([Reply(content="too late", delay=2.0)]) as server:
        client = make_client(server, timeout=0.2, max_attempts=2)
        started = time.monotonic()
        with pytest.raises(LLMCallError, match="2 attempts.*timed out"):
            client.complete(client.settings.request(MESSAGES))
        assert time.monotonic() - started < 1.5
        assert len(server.requests) == 2


def test_other_client_errors_fail_the_call_without_retry():
    with ScriptedLLMServer([Reply(status=422, error_message="cannot process this")]) as server:
        client = make_client(server)
        with pytest.raises(LLMCallError, match="422") as info:
            client.complete(client.settings.request(MESSAGES))
        assert len(server.requests) == 1
    assert not isinstance(info.value, LLMConfigError)


# configuration errors are not retried --------------------------------------------------------


def test_wrong_key_is_a_config_error_after_one_request():
    with ScriptedLLMServer(["never"], api_key=KEY) as server:
        client = make_client(server, api_key="wrong-key")
        with pytest.raises(LLMConfigError, match="rejected the API key"):
            client.complete(client.settings.request(MESSAGES))
        assert len(server.requests) == 1
        assert server.answered() == 0


def test_permission_denied_is_a_config_error_after_one_request():
    with ScriptedLLMServer([Reply(status=403)]) as server:
        client = make_client(server)
        with pytest.raises(LLMConfigError, match="403"):
            client.complete(client.settings.request(MESSAGES))
        assert len(server.requests) == 1


def test_bad_request_is_a_config_error_after_one_request():
    with ScriptedLLMServer([Reply(status=400, error_message="Unsupported parameter: 'top_k'")]) as server:
        client = make_client(server)
        with pytest.raises(LLMConfigError, match="Unsupported parameter"):
            client.complete(client.settings.request(MESSAGES))
        assert len(server.requests) == 1


def test_context_overflow_is_a_per_call_error_after_one_request():
    message = "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens."
    with ScriptedLLMServer([Reply(status=400, error_message=message)]) as server:
        client = make_client(server)
        with pytest.raises(LLMCallError, match="context") as info:
            client.complete(client.settings.request(MESSAGES))
        assert len(server.requests) == 1
    assert not isinstance(info.value, LLMConfigError)


def test_unknown_model_in_a_chat_request_is_a_config_error():
    with ScriptedLLMServer(["never"], models=("other-model",)) as server:
        client = make_client(server)
        with pytest.raises(LLMConfigError, match="not found"):
            client.complete(client.settings.request(MESSAGES))
        assert len(server.requests) == 1


# check() ---------------------------------------------------------------------------------------


def test_check_rejects_a_model_the_endpoint_does_not_serve():
    with ScriptedLLMServer(["x"], models=("alpha-model", "beta-model")) as server:
        client = make_client(server, model="gamma-model")
        with pytest.raises(LLMConfigError) as info:
            client.check()
    text = str(info.value)
    assert "gamma-model" in text
    assert "alpha-model" in text and "beta-model" in text


def test_check_passes_for_a_served_model_and_returns_the_list():
    with ScriptedLLMServer(["x"], models=("alpha-model", "beta-model")) as server:
        client = make_client(server, model="beta-model")
        assert client.check() == ["alpha-model", "beta-model"]
        assert server.model_list_calls == 1
        assert server.requests == []  # check() sends no chat request


def test_check_without_a_model_listing_returns_empty():
    with ScriptedLLMServer(["x"], models_status=404) as server:
        client = make_client(server, model="anything")
        assert client.check() == []
        assert server.model_list_calls == 1


def test_check_reports_a_rejected_key():
    with ScriptedLLMServer(["x"], api_key=KEY) as server:
        client = make_client(server, api_key="wrong-key", api_key_env="MY_LLM_KEY")
        with pytest.raises(LLMConfigError, match="MY_LLM_KEY"):
            client.check()


def test_check_reports_an_unreachable_endpoint():
    port = free_port()
    client = make_client(base_url=f"http://127.0.0.1:{port}/v1", api_key=None)
    started = time.monotonic()
    with pytest.raises(LLMConfigError, match="cannot reach") as info:
        client.check(timeout=5)
    assert f"127.0.0.1:{port}" in str(info.value)
    assert time.monotonic() - started < 5


# keys ------------------------------------------------------------------------------------------


def test_missing_key_for_a_remote_endpoint_names_the_variable():
    with pytest.raises(LLMConfigError, match="OPENAI_API_KEY"):
        LLMClient(LLMSettings(model=MODEL, base_url="https://api.example.com/v1", api_key=None))
    with pytest.raises(LLMConfigError, match="MY_LLM_KEY"):
        LLMClient(LLMSettings(model=MODEL, base_url="https://api.example.com/v1", api_key=None,
                              api_key_env="MY_LLM_KEY"))


def test_loopback_endpoint_needs_no_key():
    with ScriptedLLMServer(["no key needed"], api_key=None) as server:
        client = make_client(server, api_key=None)
        completion = client.complete(client.settings.request(MESSAGES))
        assert completion.content == "no key needed"
        assert len(server.requests) == 1


# requests --------------------------------------------------------------------------------------


def test_request_fields_pass_through_unchanged():
    settings = LLMSettings(model=MODEL, base_url="http://127.0.0.1:1/v1", max_completion_tokens=123,
                           reasoning_effort="high", temperature=0.2)
    request = settings.request(MESSAGES)
    assert request == {"model": MODEL, "messages": MESSAGES, "max_completion_tokens": 123,
                       "reasoning_effort": "high", "temperature": 0.2}
    with ScriptedLLMServer(["ok"]) as server:
        client = make_client(server)
        client.complete(request)
        body = server.requests[0]
    assert set(body) == {"model", "messages", "max_completion_tokens", "reasoning_effort", "temperature"}
    assert body["model"] == MODEL
    assert body["messages"] == MESSAGES
    assert body["max_completion_tokens"] == 123
    assert body["reasoning_effort"] == "high"
    assert body["temperature"] == 0.2
    for unset in ("top_p", "max_tokens", "stream"):
        assert unset not in body


def test_request_has_only_model_and_messages_by_default():
    assert LLMSettings(model=MODEL).request(MESSAGES) == {"model": MODEL, "messages": MESSAGES}


def test_request_key_is_a_content_hash():
    base = LLMSettings(model=MODEL, temperature=0.5).request(MESSAGES)
    same = LLMSettings(model=MODEL, temperature=0.5).request([dict(m) for m in MESSAGES])
    assert request_key(base) == request_key(same)
    assert len(request_key(base)) == 64

    reordered = dict(reversed(list(base.items())))
    assert list(reordered) != list(base)
    assert request_key(reordered) == request_key(base)
    inner_reordered = dict(base, messages=[dict(reversed(list(m.items()))) for m in MESSAGES])
    assert request_key(inner_reordered) == request_key(base)

    variants = [
        dict(base, model="other-model"),
        dict(base, temperature=0.6),
        dict(base, top_p=0.9),
        dict(base, messages=MESSAGES + [{"role": "user", "content": "again"}]),
        dict(base, messages=[MESSAGES[0], {"role": "user", "content": "write a kernel!"}]),
        dict(base, messages=MESSAGES[::-1]),
    ]
    keys = {request_key(v) for v in variants}
    assert len(keys) == len(variants)
    assert request_key(base) not in keys


# concurrency -----------------------------------------------------------------------------------


def test_concurrency_limit_caps_requests_in_flight():
    lock = threading.Lock()
    in_flight = 0
    peak = 0

    def script(body, index):
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.2)
        with lock:
            in_flight -= 1
        return Reply(content=f"answer {index}")

    with ScriptedLLMServer(script) as server:
        client = make_client(server, concurrency=2)
        request = client.settings.request(MESSAGES)
        results: list = []
        errors: list = []
        barrier = threading.Barrier(6)

        def worker():
            barrier.wait()
            try:
                results.append(client.complete(request).content)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(6)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        elapsed = time.monotonic() - started

    assert errors == []
    assert sorted(results) == sorted(f"answer {i}" for i in range(6))
    assert peak == 2
    assert elapsed >= 0.55  # three waves of 0.2 s
    assert server.script_errors == []


# endpoints -------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://localhost:8000/v1",
    "http://127.0.0.1:8000/v1",
    "http://127.0.0.2/v1",
    "http://[::1]:8000/v1",
    "http://10.1.2.3:8000/v1",
    "http://192.168.0.10/v1",
    "http://172.16.5.4/v1",
    "http://gpu-box.local:8000/v1",
])
def test_local_urls(url):
    assert is_local_url(url)


@pytest.mark.parametrize("url", [
    "https://api.openai.com/v1",
    "https://api.example.com/v1",
    "http://8.8.8.8/v1",
    "http://localhost.example.com/v1",
    "not a url",
    "",
])
def test_remote_urls(url):
    assert not is_local_url(url)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MY_LLM_KEY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_resolve_endpoint_unconfigured(clean_env):
    assert resolve_endpoint(None) == (DEFAULT_BASE_URL, None, False)
    clean_env.setenv("OPENAI_API_KEY", "")
    assert resolve_endpoint(None) == (DEFAULT_BASE_URL, None, False)


def test_resolve_endpoint_from_environment(clean_env):
    clean_env.setenv("OPENAI_BASE_URL", "http://localhost:9000/v1")
    assert resolve_endpoint(None) == ("http://localhost:9000/v1", None, True)
    # the flag beats the environment
    assert resolve_endpoint("http://127.0.0.1:7000/v1") == ("http://127.0.0.1:7000/v1", None, True)


def test_resolve_endpoint_key_alone_configures_the_default_url(clean_env):
    clean_env.setenv("OPENAI_API_KEY", "sk-test")
    assert resolve_endpoint(None) == (DEFAULT_BASE_URL, "sk-test", True)


def test_resolve_endpoint_custom_key_variable(clean_env):
    clean_env.setenv("OPENAI_API_KEY", "sk-openai")
    clean_env.setenv("MY_LLM_KEY", "sk-mine")
    assert resolve_endpoint(None, "MY_LLM_KEY") == (DEFAULT_BASE_URL, "sk-mine", True)
    clean_env.delenv("MY_LLM_KEY")
    # the named variable only: OPENAI_API_KEY is not a fallback
    assert resolve_endpoint(None, "MY_LLM_KEY") == (DEFAULT_BASE_URL, None, False)
    assert resolve_endpoint("http://localhost:8000/v1", "MY_LLM_KEY") == ("http://localhost:8000/v1", None, True)

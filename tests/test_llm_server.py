"""Tests of the scripted OpenAI-compatible test server, driven through the real openai client."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
from llm_server import Reply, ScriptedLLMServer

MODEL = "test-model"
KEY = "test-key"


_clients: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _clients:
        _clients.pop().close()


def client_for(server: ScriptedLLMServer, api_key: str = KEY, **options) -> openai.OpenAI:
    """A real openai client for `server` that never retries; closed after the test."""
    client = openai.OpenAI(base_url=server.url, api_key=api_key, max_retries=0, **options)
    _clients.append(client)
    return client


def ask(client: openai.OpenAI, text: str, model: str = MODEL, system: str | None = None):
    messages = [{"role": "system", "content": system}] if system is not None else []
    messages.append({"role": "user", "content": text})
    return client.chat.completions.create(model=model, messages=messages)


def test_scripted_answers_arrive_in_order_and_requests_are_recorded():
    script = ["first", Reply(content="second", finish_reason="length"), Reply(content="third")]
    with ScriptedLLMServer(script) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
        client = client_for(server)
        answers = [ask(client, f"question {i}", system="be brief") for i in range(3)]

        assert [a.choices[0].message.content for a in answers] == ["first", "second", "third"]
        assert [a.choices[0].finish_reason for a in answers] == ["stop", "length", "stop"]
        assert all(a.model == MODEL and a.object == "chat.completion" for a in answers)
        assert answers[0].choices[0].message.role == "assistant"
        assert len({a.id for a in answers}) == 3
        assert server.answered() == 3
        assert len(server.requests) == 3
        assert [r["messages"][-1]["content"] for r in server.requests] == [f"question {i}" for i in range(3)]
        assert server.requests[0]["model"] == MODEL
        assert server.user_texts() == [f"be brief\nquestion {i}" for i in range(3)]


def test_usage_fields_default_and_explicit():
    script = [Reply(content="x" * 40), Reply(content="hi", prompt_tokens=7, completion_tokens=3)]
    with ScriptedLLMServer(script) as server:
        client = client_for(server)
        default = ask(client, "a" * 20, system="b" * 8).usage
        assert (default.prompt_tokens, default.completion_tokens, default.total_tokens) == (7, 11, 18)
        explicit = ask(client, "anything").usage
        assert (explicit.prompt_tokens, explicit.completion_tokens, explicit.total_tokens) == (7, 3, 10)


def test_reasoning_content_is_passed_through():
    with ScriptedLLMServer([Reply(content="42", reasoning_content="thinking...")]) as server:
        message = ask(client_for(server), "q").choices[0].message
        assert message.content == "42"
        assert message.reasoning_content == "thinking..."


def test_wrong_key_is_rejected_without_consuming_the_script():
    with ScriptedLLMServer(["only"]) as server:
        with pytest.raises(openai.AuthenticationError) as info:
            ask(client_for(server, api_key="wrong"), "q")
        assert info.value.status_code == 401
        assert info.value.code == "invalid_api_key"
        assert server.answered() == 0
        with pytest.raises(openai.AuthenticationError):
            client_for(server, api_key="wrong").models.list()
        assert server.model_list_calls == 0
        assert ask(client_for(server), "q").choices[0].message.content == "only"
        assert server.answered() == 1


def test_no_api_key_means_no_authentication():
    with ScriptedLLMServer(["open"], api_key=None) as server:
        assert ask(client_for(server, api_key="anything"), "q").choices[0].message.content == "open"


def test_unknown_model_is_not_found():
    with ScriptedLLMServer(["only"], models=("a", "b")) as server:
        client = client_for(server)
        with pytest.raises(openai.NotFoundError) as info:
            ask(client, "q", model="c")
        assert info.value.code == "model_not_found"
        assert "The model `c` does not exist" in info.value.message
        assert server.answered() == 0
        assert len(server.requests) == 1  # error answers are recorded too
        assert ask(client, "q", model="b").model == "b"


def test_rate_limit_and_server_errors_raise_typed_exceptions():
    script = [
        Reply(status=429, headers={"retry-after": "0"}),
        Reply(status=500, error_message="boom"),
        Reply(status=503),
        "recovered",
    ]
    with ScriptedLLMServer(script) as server:
        client = client_for(server)
        with pytest.raises(openai.RateLimitError) as rate:
            ask(client, "q1")
        assert rate.value.response.headers["retry-after"] == "0"
        assert rate.value.type == "rate_limit_exceeded"
        with pytest.raises(openai.InternalServerError) as boom:
            ask(client, "q2")
        assert boom.value.message.endswith("boom") and boom.value.type == "server_error"
        with pytest.raises(openai.InternalServerError) as busy:
            ask(client, "q3")
        assert busy.value.status_code == 503
        assert ask(client, "q4").choices[0].message.content == "recovered"
        assert server.answered() == 4  # with max_retries=0 nothing was retried
        assert "q2" in server.user_texts()[1]


def test_streaming_and_malformed_bodies_are_bad_requests():
    with ScriptedLLMServer(["only"]) as server:
        client = client_for(server)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "q"}], stream=True)
        with pytest.raises(openai.NotFoundError):
            client.embeddings.create(model=MODEL, input="x")  # not served: any other path is 404
        assert server.answered() == 0
        assert len(server.requests) == 1  # the streaming request

        request = urllib.request.Request(
            server.url + "/chat/completions",
            data=b"{not json",
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=5)
        with info.value:
            assert info.value.code == 400
            assert json.loads(info.value.read())["error"]["type"] == "invalid_request_error"
        assert len(server.requests) == 1 and server.answered() == 0


def test_repeat_last_when_exhausted():
    with ScriptedLLMServer(["a", "b"]) as server:
        client = client_for(server)
        assert [ask(client, "q").choices[0].message.content for _ in range(4)] == ["a", "b", "b", "b"]
        assert server.answered() == 4


def test_error_when_exhausted():
    with ScriptedLLMServer(["a"], when_exhausted="error") as server:
        client = client_for(server)
        assert ask(client, "q").choices[0].message.content == "a"
        with pytest.raises(openai.InternalServerError) as info:
            ask(client, "q")
        assert "script exhausted" in info.value.message
        assert server.answered() == 1
        assert len(server.requests) == 2


def test_callable_script_sees_the_request():
    seen = []

    def script(body: dict, index: int):
        seen.append((body["messages"][-1]["content"], index))
        if index == 1:
            return Reply(status=429)
        return f"echo {body['messages'][-1]['content']} #{index}"

    with ScriptedLLMServer(script) as server:
        client = client_for(server)
        assert ask(client, "hello").choices[0].message.content == "echo hello #0"
        with pytest.raises(openai.RateLimitError):
            ask(client, "again")
        assert ask(client, "third").choices[0].message.content == "echo third #2"
        assert seen == [("hello", 0), ("again", 1), ("third", 2)]
        assert server.answered() == 3


def test_models_listing():
    with ScriptedLLMServer([], models=("m1", "m2")) as server:
        models = client_for(server).models.list()
        assert [m.id for m in models.data] == ["m1", "m2"]
        assert all(m.owned_by == "kernelopt-tests" for m in models.data)
        assert server.model_list_calls == 1


def test_models_status_404_simulates_a_server_without_the_endpoint():
    with ScriptedLLMServer([], models_status=404) as server:
        with pytest.raises(openai.NotFoundError):
            client_for(server).models.list()
        assert server.model_list_calls == 1


def test_concurrent_requests_each_get_one_distinct_entry():
    n = 8
    script = [Reply(content=f"r{i}", delay=0.3) for i in range(n)]
    with ScriptedLLMServer(script, when_exhausted="error") as server:
        client = client_for(server)
        results: list[str] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def worker(i: int) -> None:
            try:
                content = ask(client, f"thread {i}").choices[0].message.content
                with lock:
                    results.append(content)
            except BaseException as exc:  # reported by the assertions below
                with lock:
                    errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        elapsed = time.monotonic() - started

        assert errors == []
        assert sorted(results, key=lambda s: int(s[1:])) == [f"r{i}" for i in range(n)]
        assert server.answered() == n
        assert sorted(server.user_texts()) == sorted(f"thread {i}" for i in range(n))
        assert elapsed < 0.3 * n / 2  # the delays overlapped: requests were served concurrently


def test_delay_beyond_client_timeout_raises_timeout():
    with ScriptedLLMServer([Reply(content="late", delay=1.0), "on time"]) as server:
        client = client_for(server, timeout=0.2)
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            ask(client, "q")
        assert time.monotonic() - started < 0.9
        assert ask(client.with_options(timeout=5), "q").choices[0].message.content == "on time"


def test_stop_frees_the_port():
    server = ScriptedLLMServer(["a"]).start()
    client = client_for(server)
    assert ask(client, "q").choices[0].message.content == "a"  # leaves a keep-alive connection open
    port = server.port
    started = time.monotonic()
    server.stop()
    server.stop()  # idempotent
    assert time.monotonic() - started < 2
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    with pytest.raises(openai.APIConnectionError):
        ask(client, "q")


def test_stop_wakes_a_delayed_reply():
    server = ScriptedLLMServer([Reply(content="never", delay=30)]).start()
    client = client_for(server, timeout=10)
    failure: list[BaseException] = []

    def call() -> None:
        try:
            ask(client, "q")
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 5
    while server.answered() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    thread.join(timeout=5)
    assert time.monotonic() - started < 2
    assert len(failure) == 1 and isinstance(failure[0], openai.APIConnectionError)


def test_bad_arguments():
    with pytest.raises(ValueError):
        ScriptedLLMServer([], when_exhausted="loop")
    with pytest.raises(TypeError):
        ScriptedLLMServer([42])
    with pytest.raises(RuntimeError):
        _ = ScriptedLLMServer([]).url

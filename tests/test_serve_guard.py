"""`kernelopt serve` refuses what a web page could send (foreign Host or Origin, a body that is
not declared JSON) and, with a token, what lacks it (issue 34; guard.py)."""

from __future__ import annotations

import http.client
import json
import socket
import time

import pytest
from conftest import REPO

from kernelopt.kernelbench import load_problem_set
from kernelopt.rewards.service import RewardService, start_server
from kernelopt.rewards.service.guard import allowed_hosts, host_name, host_refusal
from kernelopt.sandbox import EvalOptions

PROBLEMS = load_problem_set(REPO / "examples" / "level1").problems
BODY = json.dumps({"problem": {"id": "1/1"}, "completion": "no program here"}).encode()
TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def servers():
    judged = []

    def factory(problem, options, jobs):
        judged.append(problem.name)
        raise AssertionError("a refused request reached the evaluator")

    service = RewardService(PROBLEMS, EvalOptions(device="cpu"), evaluator_factory=factory)
    open_server = start_server(service, allow_hosts=["trainer.example"])
    token_server = start_server(service, token=TOKEN)
    yield open_server, token_server
    open_server.stop(timeout=5)
    token_server.stop(timeout=5)
    assert judged == []


def request(server, method: str, path: str, headers: dict, body: bytes | None = None) -> tuple[int, dict, dict]:
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read()), {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def own(server) -> dict:
    return {"Host": f"127.0.0.1:{server.server_address[1]}"}


def test_a_json_post_from_this_machine_is_answered(servers):
    server = servers[0]
    code, answer, _ = request(server, "POST", "/v1/evaluate", {**own(server), "Content-Type": "application/json"},
                              BODY)
    assert code == 200 and answer["status"] == "format_error"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                          None])
def test_a_post_not_declared_json_is_refused_with_415(servers, content_type):
    server = servers[0]
    headers = {**own(server), **({"Content-Type": content_type} if content_type else {})}
    code, answer, _ = request(server, "POST", "/v1/evaluate", headers, BODY)
    assert code == 415 and answer["code"] == "unsupported_media_type" and "application/json" in answer["error"]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.evil.example", "", "a b"])
def test_a_foreign_host_is_refused_with_403(servers, host):
    server = servers[0]
    code, answer, _ = request(server, "POST", "/v1/evaluate", {"Host": host, "Content-Type": "application/json"},
                              BODY)
    assert code == 403 and answer["code"] == "forbidden" and "Host" in answer["error"]
    assert request(server, "GET", "/v1/problems", {"Host": host})[0] == 403


def test_loopback_names_and_listed_hosts_are_answered(servers):
    server = servers[0]
    port = server.server_address[1]
    for host in (f"localhost:{port}", f"LOCALHOST:{port}", "trainer.example", f"trainer.example:{port}"):
        assert request(server, "GET", "/v1/problems", {"Host": host})[0] == 200, host


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1", "https://127.0.0.1"])
def test_a_cross_site_request_is_refused_whatever_its_type(servers, origin):
    server = servers[0]
    for content_type in ("text/plain", "application/json"):
        code, answer, _ = request(server, "POST", "/v1/evaluate",
                                  {**own(server), "Origin": origin, "Content-Type": content_type}, BODY)
        assert code == 403 and "Origin" in answer["error"]


def test_the_service_own_origin_is_answered(servers):
    server = servers[0]
    headers = {**own(server), "Origin": f"http://127.0.0.1:{server.server_address[1]}"}
    assert request(server, "GET", "/v1/problems", headers)[0] == 200


def test_with_a_token_every_path_but_healthz_needs_it(servers):
    server = servers[1]
    json_post = {**own(server), "Content-Type": "application/json"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}):
        code, answer, response_headers = request(server, "POST", "/v1/evaluate", {**json_post, **headers}, BODY)
        assert code == 401 and answer["code"] == "unauthorized" and response_headers["www-authenticate"] == "Bearer"
        assert request(server, "GET", "/metrics", {**own(server), **headers})[0] == 401
    code, answer, _ = request(server, "POST", "/v1/evaluate", {**json_post, "Authorization": f"Bearer {TOKEN}"}, BODY)
    assert code == 200 and answer["status"] == "format_error"
    assert request(server, "GET", "/healthz", own(server))[0] == 200


def test_refusals_are_counted_in_the_metrics(servers):
    server = servers[0]
    request(server, "GET", "/v1/problems", {"Host": "evil.example"})
    status = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    status.request("GET", "/metrics")
    metrics = status.getresponse().read().decode()
    status.close()
    assert 'kernelopt_requests_total{path="/v1/problems",code="403"}' in metrics


def test_host_parsing_and_the_allowed_set():
    assert host_name("[::1]:8321") == "::1" and host_name("Example.COM:1") == "example.com"
    assert host_name("x:y") is None and host_name("") is None and host_name("a@b") is None
    assert allowed_hosts("0.0.0.0", ["gpu-box"]) == {"localhost", "127.0.0.1", "::1", "gpu-box"}
    assert "10.0.0.5" in allowed_hosts("10.0.0.5")
    assert host_refusal({"host": "app.localhost:9"}, allowed_hosts("127.0.0.1")) is None
    assert "Origin" in host_refusal({"host": "localhost:9", "origin": "http://localhost:10"}, allowed_hosts("::1"))


# -- stalled and abandoned uploads ------------------------------------------------------------------

@pytest.fixture(scope="module")
def impatient(servers):
    server = start_server(servers[0].service, body_timeout=0.5)
    yield server
    server.stop(timeout=5)


def _partial_upload(server) -> socket.socket:
    host, port = server.server_address[:2]
    connection = socket.create_connection((host, port), timeout=30)
    connection.sendall(f"POST /v1/evaluate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(BODY)}\r\n\r\n".encode() + BODY[:10])
    return connection


def _metrics(server) -> str:
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    return text


def _read_until_closed(connection: socket.socket) -> str:
    """The whole answer: the server closes the connection after it (one recv may return only
    the head, the body following in another segment)."""
    chunks = []
    while chunk := connection.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_a_stalled_upload_gets_408_and_holds_nothing(impatient):
    with _partial_upload(impatient) as connection:
        start = time.monotonic()
        answer = _read_until_closed(connection)
    assert answer.startswith("HTTP/1.1 408") and '"code": "body_timeout"' in answer
    assert time.monotonic() - start < 10


def test_an_abandoned_upload_is_counted_as_a_disconnect_not_a_server_error(impatient):
    _partial_upload(impatient).close()
    deadline = time.monotonic() + 10
    while 'path="/v1/evaluate",code="499"' not in _metrics(impatient):
        assert time.monotonic() < deadline, _metrics(impatient)
        time.sleep(0.05)
    assert 'code="500"' not in _metrics(impatient)


def test_the_refusals_are_in_the_api_description(servers):
    code, document, _ = request(servers[0], "GET", "/openapi.json", own(servers[0]))
    evaluate = document["paths"]["/v1/evaluate"]["post"]["responses"]
    assert code == 200 and {"401", "403", "408", "415"} <= set(evaluate)
    assert "403" in document["paths"]["/healthz"]["get"]["responses"]

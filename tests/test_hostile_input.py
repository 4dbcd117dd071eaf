"""Untrusted text in linear time, and answers that strict JSON parsers read (issue 34).

The parsers of what clients send (the completion parser, the OpenRLHF query's trailing special
tokens, the request bodies) must take time linear in their input and fail only with their
documented error; every answer must be strict JSON (no NaN or Infinity)."""

from __future__ import annotations

import gc
import json
import math
import time

import pytest
from conftest import REPO

from kernelopt.kernelbench import load_problem_set
from kernelopt.kernelbench.completion import ExtractedCode, FormatError, extract_code
from kernelopt.rewards import RewardError, make_reward
from kernelopt.rewards.service import RewardService, response_part, start_server
from kernelopt.rewards.service.errors import BadRequest
from kernelopt.rewards.service.http import JSONAnswer, _decode_json
from kernelopt.sandbox import EvalOptions

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PROBLEMS = load_problem_set(REPO / "examples" / "level1").problems
PROGRAM = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
KB = 1 << 10

# The inputs that took seconds to minutes before (quadratic), each as a function of its size.
HOSTILE = {
    "repeated reasoning tags": lambda n: "<think>" * (n // 7),
    "tags never closed by their kind": lambda n: "<think>a</thinking>" * (n // 19) + "</think>" + PROGRAM,
    "import lines without a fence": lambda n: "import os\n" * (n // 10),
    "import lines, junk, then ModelNew": lambda n: "import os\n" * (n // 10) + "x(\n" + PROGRAM,
    "imports and open brackets alternating": lambda n: "import os\nx(\n" * (n // 13) + PROGRAM,
    "prose lines that look like imports": lambda n: "from the docs we learn\n" * (n // 23) + PROGRAM,
    "empty fences": lambda n: "```\n" * (n // 4),
}


def _extract(text: str) -> None:
    try:
        extract_code(text)
    except FormatError:
        pass


def _seconds(action, text: str, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        action(text)
        best = min(best, time.perf_counter() - start)
    return best


def _assert_linear(action, make) -> None:
    """8x the input takes less than 30x the time (quadratic growth would be 64x), and 1 MB stays
    within seconds. Generous on purpose: it must hold on a loaded 2-core host."""
    small, large = make(128 * KB), make(1024 * KB)
    small_s = max(_seconds(action, small, repeat=3), 0.01)  # below 10 ms the clock is noise
    large_s = _seconds(action, large, repeat=2)
    assert large_s < 30 * small_s, f"{large_s:.3f} s at 1 MB vs {small_s:.3f} s at 128 KB: not linear"
    assert large_s < 10.0, f"{large_s:.1f} s for 1 MB"


@pytest.mark.parametrize("name", HOSTILE)
def test_the_completion_parser_takes_time_linear_in_hostile_answers(name):
    _assert_linear(_extract, HOSTILE[name])


@pytest.mark.parametrize("make", [lambda n: " " * n, lambda n: "x" + "<|im_end|> \n" * (n // 12),
                                  lambda n: "x" + " <eos" * (n // 5)], ids=["spaces", "tokens", "near-tokens"])
def test_the_openrlhf_special_token_strip_takes_linear_time(make):
    _assert_linear(lambda text: response_part(text, ""), make)


def test_the_linear_parser_finds_what_the_old_one_did():
    assert extract_code("<think>a</thinking>" * 3 + "</think>" + PROGRAM).code == PROGRAM
    assert extract_code("<think>x<thinking>y</think>z</thinking>\n" + PROGRAM).code == PROGRAM
    # An opening tag of a kind never closed is text; the section of the other kind is removed.
    found = extract_code("<THINK >draft</think>prose <thinking>\n```python\n" + PROGRAM + "```\n")
    assert found.code == PROGRAM and "reasoning section removed" in found.notes
    found = extract_code("import os is what I would use\n" * 50 + PROGRAM)
    assert found.code == PROGRAM and "text before line 51 dropped" in found.notes
    found = extract_code("Explanation.\nimport torch\nx = (\n" + PROGRAM)
    assert found.code == PROGRAM and "text before line 4 dropped" in found.notes
    assert response_part("q code\n<|im_end|>\n<|endoftext|> ", "q ") == "code"
    assert response_part("code  ", "") == "code  "  # no token: nothing stripped
    assert response_part("a <|not a token|>", "") == "a <|not a token|>"


# -- fuzzing: no exception but the documented one ------------------------------------------------

PIECES = st.sampled_from(["<think>", "</think>", "<thinking>", "</thinking>", "```", "```python", "~~~", "\n",
                          "    ", "import torch\n", "from x import y\n", "class ModelNew:\n", "ModelNew = M\n",
                          "    pass\n", "(", '"""', "\x00", "\ud800", "\r\n", "\ufeff", "<|im_end|>", "</s>"])
ANSWERS = st.lists(st.one_of(PIECES, st.text(max_size=20)), max_size=40).map("".join)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(ANSWERS)
def test_the_completion_parser_raises_nothing_but_format_error(text):
    try:
        found = extract_code(text)
    except FormatError as exc:
        assert str(exc)
    else:
        assert isinstance(found, ExtractedCode) and "ModelNew" in found.code and found.code.endswith("\n")


@FUZZ
@given(ANSWERS, st.text(max_size=10))
def test_the_query_split_raises_nothing(query, prompt):
    """The response (a part of the query), or None (the query does not start with the prompt:
    nothing is judged)."""
    response = response_part(query, prompt)
    assert response is None or (isinstance(response, str) and response in query)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | st.integers() | ANSWERS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)
FIELDS = st.sampled_from(["problem", "completion", "reward", "options", "query", "prompts", "labels", "id",
                          "source", "name", "atol", "rtol", "max_rel_error", "timing_budget"])
BODIES = st.dictionaries(FIELDS, JSON_VALUES | st.dictionaries(FIELDS, JSON_VALUES, max_size=3), max_size=5)


@pytest.fixture(scope="module")
def service():
    def never(*_):
        raise AssertionError("nothing is judged by the parsers")

    service = RewardService(PROBLEMS, EvalOptions(device="cpu"), evaluator_factory=never)
    yield service
    service.close()


@FUZZ
@given(BODIES)
def test_request_parsers_raise_nothing_but_bad_request(service, body):
    for parse in (service.parse_evaluate, service.parse_openrlhf):
        try:
            parse(body)
        except BadRequest as exc:
            assert exc.status == 400 and exc.message


@FUZZ
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_body_decoding_raises_nothing_but_bad_request(raw):
    try:
        _decode_json(raw)
    except BadRequest:
        pass


def test_deep_nesting_and_huge_numbers_are_bad_requests():
    for raw in (b"[" * 100_000, b'{"a": 1e999}', b'{"a": NaN}', b'{"a": -Infinity}', b'{"a": 1' + b"0" * 5000 + b"}"):
        with pytest.raises(BadRequest, match="not valid JSON"):
            _decode_json(raw)


# -- finite numbers, strict JSON -----------------------------------------------------------------

@pytest.mark.parametrize("spec, message", [
    ("speedup:cap=nan", "finite"), ("speedup:bonus=inf", "finite"), ("binary:incorrect=-inf", "finite"),
    ("log_speedup:clip=0", "above 0"), ("cuda_l1:k=-1", "above 0"), ("cuda_l1:step=-0.1", "0 or more"),
    ("speedup:format=1e300", "finite"),
])
def test_reward_parameters_must_be_finite_and_in_range(spec, message):
    with pytest.raises(RewardError, match=message):
        make_reward(spec)


def test_an_uncapped_speedup_stays_allowed():
    assert make_reward("speedup:cap=inf").params["cap"] == math.inf
    assert make_reward(make_reward("speedup").spec).spec == make_reward("speedup").spec


def strict_loads(raw: bytes):
    def refuse(name):
        raise AssertionError(f"{name} in an answer: not strict JSON")

    return json.loads(raw, parse_constant=refuse)


def test_answers_never_hold_nan_or_infinity():
    rendered = JSONAnswer({"reward": math.nan, "rewards": [1.0, math.inf], "extra": {"x": -math.inf}}).body
    assert strict_loads(rendered) == {"reward": None, "rewards": [1.0, None], "extra": {"x": None}}


@pytest.fixture(scope="module")
def server(service):
    server = start_server(service)
    yield server
    server.stop(timeout=5)


def _post(url: str, body) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, strict_loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, strict_loads(exc.read())


@pytest.mark.parametrize("body, message", [
    ({"reward": "speedup:cap=nan"}, "finite"),
    ({"options": {"atol": 1e999}}, None),  # json.dumps writes Infinity: refused as JSON
    ({"options": {"rtol": 2}}, "between 0 and 1"),
    ({"options": {"max_rel_error": 0}}, "above 0"),
    ({"options": {"timing_budget": 1e308 * 10}}, None),
    ({"problem": {"source": "x = 1\n", "name": "a\ud800"}}, "lone UTF-16 surrogate"),
    ({"problem": {"id": "1\x00"}}, "printable"),
    ({"completion": "x\udfff"}, "lone UTF-16 surrogate"),
    ({"problem": {"source": "\x00\n"}}, "not a usable reference program"),
])
def test_hostile_fields_get_400_before_any_judging(server, body, message):
    code, answer = _post(server.url + "/v1/evaluate", {"problem": {"id": "1/1"}, "completion": "no program", **body})
    assert code == 400 and answer["code"] == "bad_request", answer
    assert message is None or message in answer["error"], answer


def test_every_answer_of_the_three_slow_inputs_is_quick_and_strict(server):
    # Through the service: a 1 MB answer of each kind, answered (format_error) within seconds.
    for completion in ("<think>" * (150 * KB), "import os\n" * (100 * KB)):
        start = time.perf_counter()
        code, answer = _post(server.url + "/v1/evaluate", {"problem": {"id": "1/1"}, "completion": completion})
        assert code == 200 and answer["status"] == "format_error" and answer["reward"] == 0.0
        assert time.perf_counter() - start < 10.0
    code, answer = _post(server.url + "/v1/openrlhf", {"query": ["p" + " " * (1 << 20)], "prompts": ["p"],
                                                      "labels": ["1/1"]})
    assert code == 200 and answer["statuses"] == ["format_error"] and answer["rewards"] == [0.0]


def test_the_request_deadline_counts_from_arrival_so_parsing_is_inside_it(service):
    from kernelopt.rewards.service.errors import RequestTimedOut

    items = [service.parse_evaluate({"problem": {"id": "1/1"}, "completion": PROGRAM})]
    with pytest.raises(RequestTimedOut):  # arrived a request timeout ago: refused before it is queued
        service.submit(items, arrived=time.monotonic() - service.request_timeout - 1)
    assert service.health()["queue_depth"] == 0 and service.health()["in_flight"] == 0

"""The trainer adapters (kernelopt/rewards/adapters.py) end to end against a reward service on
loopback: TRL (sync and async), verl's compute_score and OpenRLHF's reward_func, each called
the way its trainer calls it, with verdicts from the real referee (device cpu, tiny timing
settings). Error mapping and the 429 retry use a service whose verdicts wait for a gate."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import json
import pickle
import socket
import threading
import time
import urllib.request

import pytest
from conftest import REPO

from kernelopt.kernelbench import load_problem_set
from kernelopt.rewards import adapters
from kernelopt.rewards.adapters import (RewardClient, RewardServiceError, RewardWarning, compute_score,
                                        compute_score_async, make_trl_reward, make_trl_reward_async)
from kernelopt.rewards.service import RewardService, start_server
from kernelopt.sandbox import EvalOptions, EvalResult

HONEST = (REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py").read_text()
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
RELU_SOURCE = (REPO / "examples" / "level1" / "1_ReLU.py").read_text()
PROBLEMS = load_problem_set(REPO / "examples" / "level1").problems


def answer(code: str) -> str:
    return f"I fused nothing, but this avoids a copy:\n```python\n{code}```\n"


def test_trl_reward_scores_a_batch_of_plain_text_completions(service_url):
    logged, metrics = {}, {}
    reward = make_trl_reward(service_url)
    assert reward.__name__ == "kernelopt_reward" and not inspect.iscoroutinefunction(reward)
    rewards = reward(prompts=["Write ModelNew."] * 3, completions=[answer(HONEST), WRONG, "No idea."],
                     completion_ids=[[1], [2], [3]], problem=["1/1", "ReLU", "1/1"],
                     log_extra=lambda column, values: logged.update({column: values}),
                     log_metric=lambda name, value: metrics.update({name: value}))
    assert rewards[0] > 0 and rewards[1:] == [0.0, 0.0]
    assert logged["kernelopt_status"] == ["correct", "incorrect", "format_error"]
    low, high = logged["kernelopt_interval"][0]  # every reward comes with its interval and flags
    assert low <= rewards[0] <= high and logged["kernelopt_interval"][1:] == [None, None]
    assert logged["kernelopt_flags"] == [[], [], []]
    assert metrics == {"kernelopt/correct": pytest.approx(1 / 3), "kernelopt/unscorable": 0.0}


def test_trl_async_reward_takes_conversational_completions_and_the_url_from_the_environment(service_url,
                                                                                          monkeypatch):
    monkeypatch.setenv("KERNELOPT_REWARD_URL", service_url)
    reward = make_trl_reward_async(reward="binary:format=-1,incorrect=-0.5")
    assert asyncio.iscoroutinefunction(reward)  # what older TRLs check to run it on their event loop
    prompt = [{"role": "user", "content": "Write ModelNew."}]
    completions = [[{"role": "assistant", "content": answer(WRONG)}],
                   [{"role": "assistant", "content": [{"type": "text", "text": "No program, sorry."}]}]]
    rewards = asyncio.run(reward(prompts=[prompt, prompt], completions=completions, ground_truth=["1/1", "1/1"]))
    assert rewards == [-0.5, -1.0]


def test_verl_compute_score_by_reference_source_as_verl_calls_it(service_url):
    # verl: functools.partial(compute_score, **custom_reward_function.reward_kwargs), called with keywords.
    score = functools.partial(compute_score, url=service_url, reward="speedup:incorrect=-0.25")
    result = score(data_source="kernelbench", solution_str=answer(WRONG), ground_truth=RELU_SOURCE,
                   extra_info={"num_turns": None}, details=False)
    assert result == -0.25 and isinstance(result, float)
    details = score(data_source="kernelbench", solution_str="A clamp would do.", ground_truth=RELU_SOURCE,
                    extra_info=None)  # verl logs every key beside "score"; "acc" is correctness, not speedup
    assert details == {"score": 0.0, "acc": 0.0, "correct": 0.0, "speedup": 0.0, "interval": 0.0, "flagged": 0.0,
                       "unscorable": 0.0, "status": "format_error"}
    good = score(data_source="kernelbench", solution_str=answer(HONEST), ground_truth="1/1")
    assert good["acc"] == 1.0 and good["score"] == good["speedup"] > 0 and 0 < good["interval"] < 10
    assert inspect.iscoroutinefunction(compute_score_async)
    late = asyncio.run(compute_score_async(data_source="kernelbench", solution_str="nothing", ground_truth="1/1",
                                           url=service_url, reward="speedup:format=-2"))
    assert late["score"] == -2.0


def test_openrlhf_reward_func_strips_the_prompt_and_returns_tensors(service_url):
    import torch

    # The prompt shows an example program; the first response has none of its own. Judging the
    # whole query would credit the example: only the response counts.
    prompt = f"<|im_start|>user\nExample:\n```python\n{HONEST}```\nNow yours.<|im_end|>\n<|im_start|>assistant\n"
    queries = [prompt + "Sorry, I cannot.<|im_end|>", prompt + answer(HONEST) + "<|im_end|><|endoftext|>"]
    # OpenRLHF loads the file given as --remote_rm_url under the module name "reward_func".
    spec = importlib.util.spec_from_file_location("reward_func", adapters.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.reward_func(queries, [prompt, prompt], ["1/1", "ReLU"], url=service_url)
    assert set(result) == {"rewards", "scores", "extra_logs"}
    assert isinstance(result["rewards"], torch.Tensor) and result["rewards"].shape == (2,)
    assert result["rewards"][0].item() == 0.0 and result["rewards"][1].item() > 0
    assert result["scores"].tolist() == [0.0, 1.0]
    assert result["extra_logs"]["kernelopt_correct"].tolist() == [0.0, 1.0]
    # OpenRLHF 0.8 concatenates each extra_logs value: every one is a tensor, one number per sample.
    merged = {key: torch.cat([value, value]) for key, value in result["extra_logs"].items()}
    assert set(merged) >= {"kernelopt_speedup", "kernelopt_unscorable", "kernelopt_interval", "kernelopt_flagged"}
    assert all(value.shape == (4,) for value in merged.values())


def test_a_truncated_refine_prompt_holding_a_correct_program_never_credits_a_garbage_response(service_url):
    # OpenRLHF cuts a long prompt from the left, so the query no longer starts with the prompt.
    # Our own refine prompts show the last (correct) ModelNew; the response is garbage.
    prompt = (f"<|im_start|>system\nYou write fast kernels.<|im_end|>\n<|im_start|>user\nYour last program was "
              f"correct:\n```python\n{HONEST}```\nMake it faster.<|im_end|>\n<|im_start|>assistant\n")
    response = "asdf qwer zxcv<|im_end|>"
    truncated_query = prompt[len(prompt) // 4:] + response
    result = adapters.reward_func([truncated_query, prompt + response], [prompt, prompt], ["1/1", "1/1"],
                                  url=service_url)
    assert result["scores"].tolist() == [0.0, 0.0] and result["rewards"].tolist() == [0.0, 0.0]
    assert result["extra_logs"]["kernelopt_unscorable"].tolist() == [1.0, 0.0]  # the second: a format error


def test_openrlhf_remote_endpoint_answers_what_openrlhf_reads(service_url):
    # What OpenRLHF's remote reward client sends to --remote_rm_url, at the path of its own
    # reward server (/get_reward) as well as /v1/openrlhf.
    payload = {"query": ["Q: write it\nA: no", "Q: write it\nA: later"], "prompts": ["Q: write it\n"] * 2,
               "labels": ["1/1", RELU_SOURCE]}
    for path in ("/get_reward", "/v1/openrlhf"):
        request = urllib.request.Request(service_url + path, data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            body = json.loads(response.read())
        assert body["rewards"] == [0.0, 0.0] and body["scores"] == [0.0, 0.0]
        assert body["statuses"] == ["format_error", "format_error"]
        assert body["extra_logs"] == {"kernelopt_correct": [0.0, 0.0], "kernelopt_speedup": [0.0, 0.0],
                                      "kernelopt_unscorable": [0.0, 0.0], "kernelopt_interval": [0.0, 0.0],
                                      "kernelopt_flagged": [0.0, 0.0]}
        assert body["intervals"] == [None, None] and body["flags"] == [[], []] and body["messages"] == [None, None]


# -- a sample the service cannot judge is unscorable, never the step's end -----------------------------

def test_an_unknown_problem_or_a_missing_column_makes_samples_unscorable_with_a_warning(service_url):
    with pytest.raises(RewardServiceError, match="unknown problem id '7/7'") as caught:
        RewardClient(service_url).evaluate("7/7", answer(HONEST))  # the client itself still says why
    assert caught.value.status == 400
    reward = make_trl_reward(service_url)
    with pytest.warns(RewardWarning, match="unknown problem id '7/7'"):
        rewards = reward(prompts=["p", "p"], completions=[WRONG, WRONG], problem=["7/7", "1/1"])
    assert rewards == [None, 0.0]  # TRL skips a None for that sample
    with pytest.warns(RewardWarning, match="no problem column"):
        assert reward(prompts=["p"], completions=["c"], answer=["1/1"]) == [None]
    with pytest.warns(RewardWarning, match="unknown problem id"):
        details = compute_score("kernelbench", answer(HONEST), "7/7", url=service_url, failure_reward=-1.0)
    assert details["score"] == -1.0 and details["unscorable"] == 1.0 and details["acc"] == 0.0


def test_an_unreachable_or_unconfigured_service_gives_unscorable_samples_and_an_actionable_warning(monkeypatch):
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    with pytest.raises(RewardServiceError, match="cannot reach the reward service .*kernelopt serve"):
        RewardClient(f"http://127.0.0.1:{closed_port}").evaluate("1/1", HONEST)
    monkeypatch.delenv("KERNELOPT_REWARD_URL", raising=False)
    with pytest.warns(RewardWarning, match="KERNELOPT_REWARD_URL"):
        assert adapters.trl_reward(prompts=["p"], completions=["c"], problem=["1/1"]) == [None]
    with pytest.warns(RewardWarning, match="cannot reach"):
        result = adapters.reward_func(["q"], ["p"], ["1/1"], url=f"http://127.0.0.1:{closed_port}",
                                      failure_reward=-0.5)
    assert result["rewards"].tolist() == [-0.5] and result["extra_logs"]["kernelopt_unscorable"].tolist() == [1.0]


def test_trl_rewards_are_picklable_objects_that_score_after_a_round_trip(service_url):
    # TRL's asynchronous GRPO pickles its reward functions into its workers.
    for reward in (make_trl_reward(service_url, reward="binary", name="kernel"),
                   make_trl_reward_async(service_url, reward="binary", name="kernel"), adapters.trl_reward):
        copy = pickle.loads(pickle.dumps(reward))
        assert type(copy) is type(reward) and copy.__name__ == reward.__name__
        assert asyncio.iscoroutinefunction(copy) == asyncio.iscoroutinefunction(reward)
    copy = pickle.loads(pickle.dumps(make_trl_reward_async(service_url, reward="binary", name="kernel")))
    assert asyncio.run(copy(prompts=["p"], completions=[answer(HONEST)], problem=["1/1"])) == [1.0]


class GatedEvaluator:
    def __init__(self, gate: threading.Event):
        self.gate = gate

    def evaluate_many(self, sources):
        for index, _ in enumerate(sources):
            assert self.gate.wait(30)
            yield index, EvalResult(status="correct", correct=True, speedup=3.0, durations={"total": 0.01})

    def close(self):
        pass


def test_clients_retry_an_overloaded_service_after_retry_after_or_raise_when_told_not_to():
    gate = threading.Event()
    service = RewardService(PROBLEMS, EvalOptions(device="cpu"), queue_size=1, jobs=1,
                            evaluator_factory=lambda problem, options, jobs: GatedEvaluator(gate))
    server = start_server(service)
    try:
        held = [threading.Thread(target=RewardClient(server.url).evaluate, args=("1/1", WRONG)) for _ in range(2)]
        held[0].start()
        _wait_until(lambda: service.health()["in_flight"] == 1)
        held[1].start()
        _wait_until(lambda: service.health()["queue_depth"] == 1)
        with pytest.raises(RewardServiceError, match="429: the queue is full") as caught:
            RewardClient(server.url, retry_for=0).evaluate("1/1", WRONG)
        assert caught.value.status == 429
        patient: list = []
        retrying = threading.Thread(target=lambda: patient.append(
            RewardClient(server.url, retry_for=30).evaluate("1/1", WRONG)))
        retrying.start()
        time.sleep(0.5)
        assert not patient  # still being refused, and retrying
        gate.set()
        retrying.join(30)
        assert patient and patient[0]["status"] == "correct" and patient[0]["reward"] == 3.0
    finally:
        gate.set()
        server.stop(timeout=10)


def _wait_until(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.02)

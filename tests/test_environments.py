"""Multi-turn environments (kernelopt/rewards/environments/) against a reward service on loopback
with the real referee (device cpu, tiny timing settings), driven by each trainer's own code.

- The episode itself (feedback, format errors, unscorable turns, the episode's reward): always.
- TRL 1.16.0 (the dev extra): `GRPOTrainer._tool_call_loop` runs our `evaluate` tool and
  `_calculate_rewards` our `get_reward`, on a trainer built without a model; the generation and
  the tokenizer's parsing are stubs (they are the model's part).
- verifiers 0.3.1 (not installable with the dev extra: it pins mcp<2; see docs/rewards.md):
  `vf.load_environment` and `Environment.run_group`, the rollout-and-score path prime-rl
  calls, with a ClientConfig pointing at the scripted OpenAI-compatible server tests/llm_server.py.
  Skipped without verifiers.
- OpenRLHF 0.11.2 (needs vllm, ray and deepspeed; installable with --no-deps): its
  `MultiTurnAgentExecutor.execute` with a stub engine and tokenizer. Skipped without openrlhf;
  the step/reset format it reads is pinned below in a test that always runs.
"""

from __future__ import annotations

import asyncio
import math
import pickle
import types
import warnings

import pytest
import torch
from conftest import REPO
from llm_server import Reply, ScriptedLLMServer

from kernelopt.kernelbench import load_problem_set
from kernelopt.rewards.adapters import RewardWarning
from kernelopt.rewards.environments import EpisodeError, KernelEpisode, turn_feedback, verdict_text
from kernelopt.rewards.environments import openrlhf_agent, trl_env
from kernelopt.rewards.service import RewardService, start_server
from kernelopt.sandbox import EvalOptions

HONEST = (REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py").read_text()
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
BROKEN = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relux(x)\n"
PROBLEMS = load_problem_set(REPO / "examples" / "level1").problems
RELU = next(p for p in PROBLEMS if p.problem_id == 1)
CLOSED_URL = "http://127.0.0.1:9"  # nothing listens there


def fenced(code: str) -> str:
    return f"Here it is.\n```python\n{code}```"


@pytest.fixture(scope="module")
def service_url():
    options = EvalOptions(device="cpu", timing_budget=0.3, correctness_trials=2, warmup_calls=1, min_timed_calls=3,
                          timeout=120)
    server = start_server(RewardService(PROBLEMS, options, jobs=2, queue_size=16, request_timeout=300))
    yield server.url
    server.stop()


# -- the episode -----------------------------------------------------------------------------------

def test_an_episode_feeds_back_each_verdict_and_pays_its_best_turn(service_url):
    episode = KernelEpisode("1/1", url=service_url, reward="binary:incorrect=-0.5,format=-1", max_turns=4)
    no_code = episode.step("I would use a fused kernel.")
    assert no_code.status == "format_error" and no_code.reward == -1.0 and not no_code.done
    assert no_code.feedback.startswith("verdict: format_error\nmessage: ") and "```python" in no_code.feedback
    wrong = episode.step(fenced(WRONG))
    assert wrong.status == "incorrect" and wrong.reward == -0.5
    assert "message: " in wrong.feedback and wrong.feedback.endswith("Fix it: reply with the complete corrected "
                                                                      "program in one ```python block.")
    right = episode.step(fenced(HONEST))
    assert right.status == "correct" and right.reward == 1.0 and "speedup: " in right.feedback
    assert "Make it faster" in right.feedback
    last = episode.step(fenced(WRONG))  # the fourth answer ends the episode
    assert last.done and episode.done and "Fix it" not in last.feedback
    assert episode.result() == 1.0 and episode.best_answer()["status"] == "correct"
    with pytest.raises(EpisodeError, match="over after 4 turns"):
        episode.step(fenced(HONEST))
    assert KernelEpisode("1/1", url=service_url, max_turns=4, episode_reward="last").result() is None


def test_a_compile_error_shows_the_error_and_the_target_speedup_ends_the_episode_early(service_url):
    episode = KernelEpisode(RELU.source, url=service_url, max_turns=5, target_speedup=0.001)
    broken = episode.step(fenced(BROKEN))
    assert broken.status in ("runtime_error", "compile_error") and "relux" in broken.feedback
    done = episode.step(fenced(HONEST))
    assert done.status == "correct" and done.done and len(episode.turns) == 2


def test_an_unjudgeable_turn_warns_and_the_episode_goes_on():
    episode = KernelEpisode("1/1", url=CLOSED_URL, max_turns=2)
    with pytest.warns(RewardWarning, match="a turn is unscorable: cannot reach the reward service"):
        turn = episode.step(fenced(HONEST))
    assert turn.reward is None and not turn.done and turn.feedback.startswith("verdict: unscorable")
    assert episode.result() is None


def test_feedback_shows_no_data_of_the_trials_nor_dumped_values():
    answer = {"status": "incorrect", "correct": False, "speedup": None,
              "message": "output 0 mismatch: max abs error 0.5\nexpected tensor([0.1234, 0.5678])\n"
                         "reference 0.11 0.22 0.33 0.44 0.55 0.66 0.77 0.88 0.99",
              "trials": [{"index": 0, "max_abs_error": 0.5, "message": "SECRET-TRIAL"}],
              "candidate_output": "SECRET-OUTPUT", "logs": "SECRET-LOG", "compile_log": "warning only"}
    text = verdict_text(answer)
    assert text == "verdict: incorrect\nmessage: output 0 mismatch: max abs error 0.5"
    correct = {"status": "correct", "correct": True, "speedup": 2.0, "speedup_interval": [1.9, 2.1],
               "flags": ["reduced_precision"], "message": ""}
    assert turn_feedback(correct, last=True) == ("verdict: correct\nspeedup: 2.000x over the reference (95% "
                                                 "interval 1.900x to 2.100x: a smaller difference is noise)\n"
                                                 "flags: reduced_precision")


@pytest.mark.parametrize("settings, match", [({"max_turns": 0}, "max_turns"), ({"episode_reward": "sum"}, "best"),
                                             ({"target_speedup": -1.0}, "target_speedup")])
def test_bad_episode_settings_are_refused(settings, match):
    with pytest.raises(EpisodeError, match=match):
        KernelEpisode("1/1", **settings)
    with pytest.raises(EpisodeError, match=match):
        trl_env.environment_factory(CLOSED_URL, **settings)()

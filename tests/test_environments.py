"""Multi-turn environments (kernelopt/rewards/environments/) against a reward service on loopback
with the real referee (device cpu, tiny timing settings), driven by each trainer's own code.

- The episode itself (feedback, format errors, unscorable turns, the episode's reward): always.
- TRL 1.16.0 (the dev extra): `GRPOTrainer._tool_call_loop` runs our `evaluate` tool and
  `_calculate_rewards` our `get_reward`, on a trainer built without a model; the generation and
  the tokenizer's parsing are stubs (they are the model's part).
- verifiers 0.3.1 (not installable with the dev extra: it pins mcp<2; `scripts/setup_rl_envs.sh`):
  `vf.load_environment` and `Environment.run_group` (what verifiers' env server worker and
  `generate` call to roll out and score a group), with a ClientConfig pointing at the scripted OpenAI-compatible server tests/llm_server.py.
  Skipped without verifiers.
- OpenRLHF 0.11.2 (needs vllm, ray and deepspeed; `scripts/setup_rl_envs.sh` installs it without): its
  `MultiTurnAgentExecutor.execute` with a stub engine and tokenizer. Skipped without openrlhf;
  the step/reset format it reads is pinned below in a test that always runs.
"""

from __future__ import annotations

import asyncio
import pickle
import types
import warnings

import pytest
import torch
from conftest import REPO, CharTokenizer, ScriptedEngine
from llm_server import Reply, ScriptedLLMServer

from kernelopt.kernelbench import load_problem_set
from kernelopt.rewards.adapters import RewardWarning
from kernelopt.rewards.environments import EpisodeError, KernelEpisode, turn_feedback, verdict_text
from kernelopt.rewards.environments import openrlhf_agent, trl_env

HONEST = (REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py").read_text()
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
BROKEN = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relux(x)\n"
PROBLEMS = load_problem_set(REPO / "examples" / "level1").problems
RELU = next(p for p in PROBLEMS if p.problem_id == 1)
CLOSED_URL = "http://127.0.0.1:9"  # nothing listens there


def fenced(code: str) -> str:
    return f"Here it is.\n```python\n{code}```"


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
    with pytest.raises(EpisodeError, match=match):  # OpenRLHF's instances take their settings as class attributes
        type("Agent", (openrlhf_agent.KernelAgentInstance,), settings)()


def test_openrlhf_agent_settings_from_malformed_variables_are_refused(monkeypatch):
    monkeypatch.setenv("KERNELOPT_AGENT_MAX_TURNS", "four")
    with pytest.raises(EpisodeError, match="KERNELOPT_AGENT_MAX_TURNS='four' is not a whole number"):
        openrlhf_agent.KernelAgentInstance()
    monkeypatch.setenv("KERNELOPT_AGENT_MAX_TURNS", "0")
    with pytest.raises(EpisodeError, match="max_turns must be a whole number of at least 1, not 0"):
        openrlhf_agent.KernelAgentInstance()


# -- TRL: environment_factory through GRPOTrainer's tool loop and reward step ----------------------

def _tool_call(code: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "evaluate", "arguments": {"code": code}}}]}


def test_trl_runs_our_environment_through_its_tool_loop_and_reward_step(service_url, monkeypatch):
    pytest.importorskip("trl")
    import inspect

    from test_trainers import _grpo_trainer_without_a_model
    from transformers.utils import get_json_schema
    from trl.trainer import grpo_trainer as grpo

    factory = pickle.loads(pickle.dumps(trl_env.environment_factory(
        service_url, reward="binary:incorrect=-0.5,format=-1", max_turns=3)))
    # What GRPOTrainer.__init__ reads off a probe instance: reset, get_reward, and the tools.
    probe = factory()
    members = dict(inspect.getmembers(type(probe), predicate=inspect.isfunction))
    tools = [name for name in members if name not in ("reset", "get_reward") and not name.startswith("_")]
    assert tools == ["evaluate"] and "reset" in members and "get_reward" in members
    schema = get_json_schema(probe.evaluate)  # what the chat template gets for the tool
    assert schema["function"]["parameters"]["required"] == ["code"]

    def get_reward(environments, **kwargs):  # the wrapper __init__ makes of get_reward
        return [e.get_reward() for e in environments]

    trainer, _, _ = _grpo_trainer_without_a_model([get_reward])
    environments = [factory() for _ in range(3)]
    prompt = [{"role": "user", "content": "Write ModelNew for ReLU."}]
    inputs = [{"prompt": prompt, "problem": "1/1"} for _ in environments]
    prompts = []
    for environment, row in zip(environments, inputs):  # _generate_and_score_completions' reset
        note = environment.reset(**row)
        prompts.append([{**prompt[0], "content": prompt[0]["content"] + note}])
    assert "`evaluate` tool" in prompts[0][0]["content"] and "3 times" in prompts[0][0]["content"]
    vars(trainer).update(
        environments=environments, environment_factories={None: factory}, _batch_environments=[None] * 3,
        _env_tools={None: [environments[0].evaluate]}, tools=[environments[0].evaluate],
        _sync_tool_dicts=[{"evaluate": e.evaluate} for e in environments], _async_tool_dicts=[{}, {}, {}],
        max_tool_calling_iterations=4, use_vllm=False, _is_vlm=False, max_completion_length=10**6,
        model=types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=10**6)), _tokenizer=None)

    # The model's turns after each tool answer, per rollout (the generation and parsing are stubs).
    script = {0: iter([_tool_call(fenced(HONEST)), {"role": "assistant", "content": "Done."}]),
              2: iter([{"role": "assistant", "content": "I give up."}])}
    monkeypatch.setattr(trainer, "_generate_single_turn", lambda ids, *a, **k: ([[1000 + i[0]] for i in ids], None),
                        raising=False)
    monkeypatch.setattr(trainer, "_get_tool_suffix_ids", lambda messages: [7] * len(messages), raising=False)
    monkeypatch.setattr(grpo, "parse_response", lambda tokenizer, ids, **kwargs: next(script[ids[0] - 1000]))
    completions = [[_tool_call(fenced(WRONG))], [{"role": "assistant", "content": "No tool for me."}],
                   [_tool_call("a fused kernel, trust me")]]
    prompt_ids = [[0], [1], [2]]
    loop = trainer._tool_call_loop([list(p) for p in prompts], prompt_ids, [[9], [9], [9]], completions, None, None,
                                   None)
    _, completions, _, _, calls, failures, _ = loop
    assert (calls, failures) == (3, 0)
    tool_texts = [[m["content"] for m in c if m["role"] == "tool"] for c in completions]
    assert tool_texts[0][0].startswith("verdict: incorrect") and tool_texts[0][1].startswith("verdict: correct")
    assert tool_texts[1] == [] and tool_texts[2][0].startswith("verdict: format_error")

    rewards = trainer._calculate_rewards(inputs, prompts, completions, [[1]] * 3)
    # The best tested program; no program tested: the format reward; only a format error: the same.
    assert rewards[:, 0].tolist() == [1.0, -1.0, -1.0]
    assert [t.status for t in environments[1]._episode.turns] == ["format_error"]
    third = environments[0].evaluate(fenced(HONEST))  # the third of three: no request for another
    assert third.startswith("verdict: correct") and "Make it faster" not in third
    assert environments[0].evaluate(fenced(HONEST)).startswith("No evaluations left")


# -- verifiers: load_environment and run_group, as its env server calls them -----------------------------

@pytest.fixture
def keep_signal_handlers():
    """verifiers' Environment installs SIGINT/SIGTERM handlers; the test session keeps its own."""
    import signal

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_verifiers_environment_rolls_out_and_scores_with_the_referee(service_url, monkeypatch, keep_signal_handlers):
    vf = pytest.importorskip("verifiers")
    if not hasattr(vf, "MultiTurnEnv"):
        pytest.skip("this verifiers has no classic MultiTurnEnv (0.4's v1 API is not supported)")
    answers = ["I would fuse it.", fenced(WRONG), fenced(HONEST), fenced(HONEST)]

    def reply(body, index):  # the answer for the conversation's turn
        turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        return Reply(content=answers[turn])

    monkeypatch.setenv("KERNELOPT_TEST_LLM_KEY", "test-key")
    env = vf.load_environment("kernelopt.rewards.environments.verifiers_env", problem_set=str(REPO / "examples" /
                              "level1"), ids="1", label="id", url=service_url, reward="binary:incorrect=-0.5,format=-1",
                              max_turns=3)
    assert env.env_id == "kernelopt.rewards.environments.verifiers_env" and len(env.get_dataset()) == 1
    row = env.get_dataset().to_list()[0]
    assert row["answer"] == "1/1" and "class Model" in row["prompt"][-1]["content"]
    with ScriptedLLMServer(reply) as llm:
        client = vf.ClientConfig(api_base_url=llm.url, api_key_var="KERNELOPT_TEST_LLM_KEY", max_retries=0)
        outputs = asyncio.run(env.run_group([row, row], client, "test-model", {"temperature": 1.0}))
        seen = [[m["content"] for m in body["messages"] if m["role"] == "user"][1:] for body in llm.requests]
    assert len(outputs) == 2 and llm.answered() == 6  # three turns per rollout, the fourth answer never asked
    for output in outputs:
        assert output["error"] is None and output["reward"] == 1.0, output  # the best of its three turns
        metrics = output["metrics"]
        assert metrics["kernelopt_correct"] == 1.0 and metrics["kernelopt_speedup"] > 0
        assert metrics["kernelopt_judged_turns"] == 3.0 and metrics["num_turns"] == 3
        assert output["stop_condition"] in ("kernelopt_done", "max_turns_reached")
        feedback = [m["content"] for m in output["completion"] if m["role"] == "user"]
        assert feedback[0].startswith("verdict: format_error") and feedback[1].startswith("verdict: incorrect")
    # What the model read: the verdict of its previous answer, then what to do.
    assert sorted(len(s) for s in seen) == [0, 0, 1, 1, 2, 2]
    assert all(s[-1].startswith("verdict: incorrect") and s[-1].endswith("block.") for s in seen if len(s) == 2)


# -- OpenRLHF 0.11: the agent file, through MultiTurnAgentExecutor.execute -------------------------


def _agent_settings(monkeypatch, url: str, max_turns: int = 3) -> None:
    monkeypatch.setenv("KERNELOPT_REWARD_URL", url)
    monkeypatch.setenv("KERNELOPT_AGENT_REWARD", "binary:incorrect=-0.5,format=-1")
    monkeypatch.setenv("KERNELOPT_AGENT_MAX_TURNS", str(max_turns))


def test_openrlhf_executor_runs_our_agent_file(service_url, monkeypatch, tmp_path):
    pytest.importorskip("openrlhf.utils.agent")
    import importlib.util

    from openrlhf.utils.agent import AgentExecutorBase

    _agent_settings(monkeypatch, service_url)
    agent_file = tmp_path / "kernel_agent.py"
    agent_file.write_text("from kernelopt.rewards.environments.openrlhf_agent import AgentExecutor  # noqa: F401\n")
    # How 0.11.2's vllm_engine._load_agent_executor loads --train.agent_func_path (it imports vllm itself).
    spec = importlib.util.spec_from_file_location("agent_module", agent_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    executor = module.AgentExecutor()

    prompt = "<|im_start|>user\nWrite ModelNew for ReLU.<|im_end|>\n<|im_start|>assistant\n"
    engine = ScriptedEngine(["I would fuse it.", fenced(WRONG), fenced(HONEST)])
    params = types.SimpleNamespace(max_tokens=None, logprobs=None)
    result = asyncio.run(executor.execute(prompt, "1/1", params, 10**6, CharTokenizer(), engine))
    assert result["reward"] == pytest.approx(1.0) and result["scores"] == 1.0  # the sum of the steps: the best turn
    assert len(result["action_ranges"]) == 3 and engine.answers == []
    assert result["extra_logs"]["kernelopt_turns"] == 3.0 and result["extra_logs"]["kernelopt_speedup"] > 0
    # The second and third generations saw the verdicts in ChatML user turns.
    assert engine.seen[1].endswith("<|im_end|>\n<|im_start|>assistant\n") and "verdict: format_error" in engine.seen[1]
    assert "<|im_start|>user\nverdict: incorrect" in engine.seen[2]
    text = CharTokenizer().decode(result["observation_tokens"])
    assert text.startswith(prompt) and text.endswith(fenced(HONEST))  # the last turn adds no feedback


def test_openrlhf_011_step_and_reset_formats_are_what_its_executor_reads(service_url, monkeypatch):
    """Pinned from openrlhf 0.11.2's `utils/agent.py` (runs without openrlhf): the executor makes
    `agent_instance_cls()` without arguments, reads reset(...)["observation"], and of each
    step: `rewards.item()` added up, "scores", "environment_feedback" (text appended to the
    tokens), "done", "extra_logs" (later `torch.tensor([value])` per key)."""
    _agent_settings(monkeypatch, service_url, max_turns=2)
    agent = openrlhf_agent.KernelAgentInstance()
    prompt = "<|im_start|>user\nWrite ModelNew.<|im_end|>\n<|im_start|>assistant\n"
    reset = asyncio.run(agent.reset({"observation": prompt, "label": "1/1"}))
    assert reset["observation"] == prompt
    total, steps = 0.0, []
    for action in (fenced(WRONG), "nothing"):
        step = asyncio.run(agent.step({"observation_text": prompt, "action_text": action, "label": "1/1",
                                       "sampling_params": None}))
        total += step["rewards"].item()
        assert isinstance(step["environment_feedback"], str) and isinstance(step["done"], bool)
        assert all(torch.tensor([value]).shape == (1,) for value in step["extra_logs"].values())
        steps.append(step)
    assert [s["done"] for s in steps] == [False, True] and total == pytest.approx(-0.5)  # the best: incorrect
    assert steps[0]["environment_feedback"].startswith("<|im_end|>\n<|im_start|>user\nverdict: incorrect")
    assert steps[1]["environment_feedback"] == "" and steps[1]["scores"] == 0.0


def test_openrlhf_agent_pays_the_failure_reward_when_no_turn_is_judged(monkeypatch):
    _agent_settings(monkeypatch, CLOSED_URL, max_turns=1)
    monkeypatch.setenv("KERNELOPT_AGENT_FAILURE_REWARD", "-2")
    agent = openrlhf_agent.KernelAgentInstance()
    asyncio.run(agent.reset({"observation": "p", "label": "1/1"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = asyncio.run(agent.step({"observation_text": "p", "action_text": fenced(HONEST), "label": "1/1"}))
    assert any(issubclass(w.category, RewardWarning) for w in caught)
    assert step["rewards"].item() == -2.0 and step["done"] and step["extra_logs"]["kernelopt_unscorable"] == 1.0

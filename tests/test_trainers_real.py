"""kernelopt's verl and OpenRLHF adapters called by the trainers' own reward-calling code (the
packages installed without their heavy dependencies by scripts/setup_rl_envs.sh, each version
in its own folder), against a reward service on loopback with the real referee (device cpu,
tiny timing settings). Stubs stand only for the tokenizer, the generation engine and Ray's
remote calls. `scripts/test.sh --all` runs this file twice:

    PYTHONPATH=.rl-envs-verl:.rl-envs               verl 0.9.1 and openrlhf 0.11.2
    PYTHONPATH=.rl-envs-verl06:.rl-envs-openrlhf08  verl 0.6.1 and openrlhf 0.8.11

Without the packages (the main run) every test skips; with KERNELOPT_TRAINERS naming a version
line (e.g. "verl-0.9 openrlhf-0.11"), a test of that line fails instead of skipping, so that a
broken install cannot pass as skips.

- verl 0.9.1: `trainer.ppo.reward.load_reward_manager` (which loads our file through
  `get_custom_reward_fn` from `reward.custom_reward_function`, by file path and by `pkg://`
  module), the `naive` reward manager
  inside `RewardLoopWorker.compute_score_batch`, and `RewardLoopManager.compute_rm_score` with
  `extract_reward`, sync and async reward functions.
- verl 0.6.1: `load_reward_manager` (top-level `custom_reward_function`) and `compute_reward`
  with the `naive` manager.
- OpenRLHF 0.11.2: `SingleTurnAgentExecutor.execute`, over HTTP to `--remote_rm_url
  URL/v1/openrlhf` and with our file as the reward function, a prompt cut from the left.
- OpenRLHF 0.8.11: `remote_rm_utils.remote_rm_fn_ray`'s function (`request_api_wrapper`) over
  HTTP. Its experience maker (`update_samples_with_rewards`) cannot be imported without
  deepspeed (`openrlhf.models.actor` imports it) and torchdata (`openrlhf.utils.deepspeed`), so
  its merge stays restated from source (tests/test_trainers.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import types
from importlib import metadata

import numpy as np
import pytest
import torch
from conftest import REPO, CharTokenizer, ScriptedEngine
from packaging.version import Version
from test_trainers import _openrlhf_08_update_samples_with_rewards

from kernelopt.rewards import adapters

HONEST = (REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py").read_text()
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
if not os.environ.get("KERNELOPT_TRAINERS") and not any(importlib.util.find_spec(p) for p in ("verl", "openrlhf")):
    pytest.skip("neither verl nor openrlhf is installed: scripts/setup_rl_envs.sh", allow_module_level=True)

# A refine prompt that holds a correct ModelNew: its code must never be credited.
PROMPT = f"<|im_start|>user\nMake this faster:\n```python\n{HONEST}```<|im_end|>\n<|im_start|>assistant\n"


def fenced(code: str) -> str:
    return f"```python\n{code}```"


def _line(package: str, low: str, high: str) -> None:
    """Skips unless `package` is installed at a version in [low, high); a failure instead when
    KERNELOPT_TRAINERS names that line (CI's runs with the packages)."""
    wanted = f"{package}-{low}"
    try:
        version = Version(metadata.version(package))
    except metadata.PackageNotFoundError:
        version = None
    if version is not None and Version(low) <= version < Version(high):
        return
    message = f"{package} {low} to {high} is not installed here (found {version}); see scripts/setup_rl_envs.sh"
    if wanted in os.environ.get("KERNELOPT_TRAINERS", "").split():
        pytest.fail(message)
    pytest.skip(message)


# -- verl ------------------------------------------------------------------------------------------

def _verl_batch(samples: list[tuple[str, str, str]]):
    """A DataProto as verl's rollout leaves it: prompts left-padded, responses right-padded, one
    attention mask over both, and the dataset's non-tensor columns."""
    from verl import DataProto

    width_p = max(len(p) for p, _, _ in samples)
    width_r = max(len(r) for _, r, _ in samples)
    prompts = torch.zeros(len(samples), width_p, dtype=torch.long)
    responses = torch.zeros(len(samples), width_r, dtype=torch.long)
    mask = torch.zeros(len(samples), width_p + width_r, dtype=torch.long)
    for i, (prompt, response, _) in enumerate(samples):
        prompts[i, width_p - len(prompt):] = torch.tensor([ord(c) for c in prompt])
        responses[i, :len(response)] = torch.tensor([ord(c) for c in response])
        mask[i, width_p - len(prompt):width_p + len(response)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
                 "attention_mask": mask},
        non_tensors={"data_source": np.array(["kernelopt"] * len(samples), dtype=object),
                     "reward_model": np.array([{"style": "rule", "ground_truth": g} for _, _, g in samples]),
                     "extra_info": np.array([{"index": i} for i in range(len(samples))])})


VERL_SAMPLES = [(PROMPT, fenced(WRONG), "1/1"),         # wrong: the incorrect reward
                (PROMPT, "I copied nothing.", "1/1"),  # the prompt's correct code is not credited
                (PROMPT, fenced(HONEST), "1/1"),       # correct: its speedup
                (PROMPT, fenced(HONEST), "8/88")]      # an unknown problem: the failure reward, a warning


def _check_verl_rewards(reward_tensor: torch.Tensor, extra: dict) -> None:
    lengths = [len(r) for _, r, _ in VERL_SAMPLES]
    scores = [reward_tensor[i, n - 1].item() for i, n in enumerate(lengths)]
    assert reward_tensor.sum().item() == pytest.approx(sum(scores))  # nothing anywhere else
    assert scores[0] == -0.25 and scores[1] == 0.0 and scores[2] > 0 and scores[3] == 0.0
    assert list(extra["status"]) == ["incorrect", "format_error", "correct", "unscorable"]
    assert list(extra["acc"]) == [0.0, 0.0, 1.0, 0.0]  # correctness, never the speedup
    assert list(extra["unscorable"]) == [0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(("name", "path"), [("compute_score", adapters.__file__),  # a file path
                                            ("compute_score_async", "pkg://kernelopt.rewards.adapters")])
def test_verl_09_reward_loop_loads_our_file_and_scores_the_response_only(service_url, name, path, monkeypatch):
    _line("verl", "0.9", "1.0")
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop import reward_loop
    from verl.trainer.ppo.reward import extract_reward

    tokenizer = CharTokenizer()
    monkeypatch.setattr(reward_loop, "copy_to_local", lambda path, **kwargs: path)
    monkeypatch.setattr(reward_loop, "hf_tokenizer", lambda path, **kwargs: tokenizer)  # no model files
    config = OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": "stub-model", "tokenizer_path": None}},
        "reward": {"num_workers": 1,
                   "custom_reward_function": {"path": path, "name": name,
                                              "reward_kwargs": {"url": service_url,
                                                                "reward": "speedup:incorrect=-0.25"}},
                   "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": None}},
                   "reward_model": {"enable": False, "enable_resource_pool": False}}})
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # what the Ray actor's thread has: the worker keeps this loop
    try:
        worker = reward_loop.RewardLoopWorker(config)  # loads our function (get_custom_reward_fn)

        class InlineHandle:  # Ray's actor handle, run in this process
            compute_score_batch = types.SimpleNamespace(
                remote=lambda chunk: loop.run_until_complete(worker.compute_score_batch(chunk)))

        manager = object.__new__(reward_loop.RewardLoopManager)  # its __init__ starts Ray actors
        manager.config, manager.reward_model_manager = config, None
        manager.reward_manager_cls = reward_loop.resolve_reward_manager_cls(config)
        manager.reward_loop_workers = [InlineHandle()]
        monkeypatch.setattr(reward_loop, "ray", types.SimpleNamespace(get=lambda refs: refs))
        with pytest.warns(UserWarning, match="unscorable.*unknown problem id '8/88'"):  # the loaded file's class
            out = manager.compute_rm_score(_verl_batch(VERL_SAMPLES))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    reward_tensor, extra = extract_reward(out)
    _check_verl_rewards(reward_tensor, extra)


def test_verl_06_compute_reward_with_the_naive_manager_loads_our_file(service_url):
    _line("verl", "0.6", "0.7")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import compute_reward, load_reward_manager

    config = OmegaConf.create({
        "custom_reward_function": {"path": adapters.__file__, "name": "compute_score",
                                   "reward_kwargs": {"url": service_url, "reward": "speedup:incorrect=-0.25"}},
        "reward_model": {"reward_manager": "naive"}, "data": {"reward_fn_key": "data_source"}})
    reward_fn = load_reward_manager(config, CharTokenizer(), num_examine=0)
    with pytest.warns(UserWarning, match="unscorable.*unknown problem id '8/88'"):  # the loaded file's class
        reward_tensor, extra = compute_reward(_verl_batch(VERL_SAMPLES), reward_fn)
    _check_verl_rewards(reward_tensor, extra)


# -- OpenRLHF ----------------------------------------------------------------------------------------


def _rollout(executor, answer: str, label: str = "1/1", cut: int = 0) -> tuple[dict, str]:
    """One rollout through 0.11's executor: max_length leaves the prompt `cut` characters short,
    which 0.11 cuts from the left."""
    engine = ScriptedEngine([answer])
    params = types.SimpleNamespace(max_tokens=len(answer) + 1, logprobs=None)
    result = asyncio.run(executor.execute(PROMPT, label, params, len(PROMPT) + len(answer) + 1 - cut,
                                          CharTokenizer(), engine))
    return result, engine.seen[0]


def test_openrlhf_011_single_turn_executor_posts_each_rollout_to_our_service(service_url):
    _line("openrlhf", "0.11", "0.12")
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    executor = SingleTurnAgentExecutor(remote_rm_url=f"{service_url}/v1/openrlhf")
    wrong, _ = _rollout(executor, fenced(WRONG))
    honest, _ = _rollout(executor, fenced(HONEST))
    nothing, _ = _rollout(executor, "I copied nothing.")
    cut, seen = _rollout(executor, "I copied nothing.", cut=40)
    assert seen == PROMPT[40:]  # the executor did cut the prompt from the left
    # JSON answers: one number per key for the one sample of each request.
    assert wrong["reward"] == [0.0] and wrong["extra_logs"]["kernelopt_correct"] == [0.0]
    assert honest["reward"][0] > 0 and honest["scores"] == [1.0] and honest["extra_logs"]["kernelopt_correct"] == [1.0]
    assert nothing["reward"] == [0.0] and nothing["extra_logs"]["kernelopt_unscorable"] == [0.0]
    # The query no longer starts with the prompt: unscorable, the prompt's ModelNew never judged.
    assert cut["reward"] == [0.0] and cut["scores"] == [0.0] and cut["extra_logs"]["kernelopt_unscorable"] == [1.0]


def test_openrlhf_011_single_turn_executor_runs_our_file_as_reward_func(service_url, monkeypatch):
    _line("openrlhf", "0.11", "0.12")
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    monkeypatch.setenv(adapters.URL_ENV, service_url)
    executor = SingleTurnAgentExecutor(remote_rm_url=adapters.__file__)  # loaded as 0.11.2 loads a .py
    assert executor.reward_func is not None
    honest, _ = _rollout(executor, fenced(HONEST))
    cut, _ = _rollout(executor, fenced(HONEST) + "\n", cut=40)
    assert honest["reward"].shape == (1,) and honest["reward"].item() > 0  # reward_func's tensors
    assert honest["extra_logs"]["kernelopt_correct"].tolist() == [1.0]
    assert cut["extra_logs"]["kernelopt_unscorable"].tolist() == [1.0] and cut["reward"].tolist() == [0.0]


def test_openrlhf_08_remote_rm_client_gets_a_batch_it_can_merge(service_url):
    _line("openrlhf", "0.8", "0.9")
    from openrlhf.utils.remote_rm_utils import remote_rm_fn_ray

    post = remote_rm_fn_ray._function  # the Ray task's body: request_api_wrapper(url, {query, prompts, labels})
    queries = [PROMPT + fenced(WRONG), PROMPT + fenced(HONEST), PROMPT[40:] + "cut", PROMPT + "no"]
    prompts, labels = [PROMPT] * 4, ["1/1"] * 4
    # Two shards, as RemoteRewardModel.get_rewards splits a batch over two --remote_rm_url servers.
    chunks = [post(f"{service_url}/v1/openrlhf?extra_logs=0", queries[:2], prompts[:2], labels[:2]),
              post(f"{service_url}/v1/openrlhf?extra_logs=0", queries[2:], prompts[2:], labels[2:])]
    assert all("extra_logs" not in chunk for chunk in chunks)  # what 0.8's HTTP path can merge
    merged = _openrlhf_08_update_samples_with_rewards(chunks, [3, 1])
    rewards = torch.cat(merged["rewards"]).tolist()
    assert rewards[0] == 0.0 and rewards[1] > 0 and rewards[2:] == [0.0, 0.0]
    assert torch.cat(merged["scores"]).tolist() == [0.0, 1.0, 0.0, 0.0]
    # With the logs, 0.8.11 would torch.cat JSON lists: the reason for ?extra_logs=0 over HTTP.
    logged = post(f"{service_url}/v1/openrlhf", queries[3:], prompts[3:], labels[3:])
    with pytest.raises(TypeError):
        _openrlhf_08_update_samples_with_rewards([logged], [1])

"""kernelopt's rewards called by the trainers' own reward-calling code, against a reward service
on loopback with the real referee (device cpu, tiny timing settings).

- TRL (1.16.0, the dev extra): `GRPOTrainer._calculate_rewards` itself, on a trainer object
  built without a model (only the attributes that method reads: the model is not involved in
  computing rewards). Skipped when trl is not installed.
- verl and OpenRLHF: their real reward-calling code runs in tests/test_trainers_real.py (their
  packages installed beside the venv by scripts/setup_rl_envs.sh). The formats below, pinned from
  their source, run without them: verl 0.9.1's reward loop (how it loads and calls a custom
  reward function), and OpenRLHF 0.8.11 (`remote_rm_utils.remote_rm_fn_ray` posts {"query",
  "prompts", "labels"} for a batch; `experience_maker.update_samples_with_rewards`, which cannot
  be imported without deepspeed, applies `torch.as_tensor` to "rewards"/"scores" and `torch.cat`
  to each "extra_logs" value) and 0.11.2 (`agent.SingleTurnAgentExecutor` posts one sample per
  request, the prompt possibly cut from the left; `samples_generator` makes `torch.tensor([value])`
  of each).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import pickle
import types

import pytest
import torch
from conftest import REPO

from kernelopt.rewards import adapters

HONEST = (REPO / "examples" / "candidates" / "1_ReLU" / "relu_clamp.py").read_text()
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def _grpo_trainer_without_a_model(reward_funcs: list):
    """A GRPOTrainer holding what `_calculate_rewards` reads, set up as its __init__ sets it."""
    grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    from accelerate import PartialState
    from trl.trainer.utils import get_callable_name, is_async_callable

    PartialState(cpu=True)  # what the trainer's Accelerator sets up: one process, on the CPU
    trainer = object.__new__(grpo.GRPOTrainer)
    logged_extra, logged_metrics = {}, {}
    vars(trainer).update(
        accelerator=types.SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
        args=types.SimpleNamespace(report_to=[]), state=types.SimpleNamespace(global_step=0),
        reward_funcs=reward_funcs, reward_processing_classes=[None] * len(reward_funcs),
        reward_func_names=[get_callable_name(f) for f in reward_funcs], environments=None,
        _log_completion_extra=lambda column, values: logged_extra.update({column: values}),
        _log_metric=lambda name, value: logged_metrics.update({name: value}))
    if any(is_async_callable(f) for f in reward_funcs):
        trainer.async_loop_thread, trainer.async_loop, ready = grpo.start_event_loop_in_daemon(name="test-loop")
        ready.wait()
    return trainer, logged_extra, logged_metrics


def test_trl_calculate_rewards_calls_our_picklable_rewards_sync_and_async(service_url):
    pytest.importorskip("trl")
    # TRL's async GRPO pickles reward functions: the ones it calls here went through pickle.
    sync_reward = pickle.loads(pickle.dumps(adapters.make_trl_reward(service_url, reward="binary:incorrect=-0.5")))
    async_reward = pickle.loads(pickle.dumps(adapters.make_trl_reward_async(service_url, name="kernelopt_speedup")))
    trainer, logged_extra, logged_metrics = _grpo_trainer_without_a_model([sync_reward, async_reward])
    try:
        assert trainer.reward_func_names == ["kernelopt_reward", "kernelopt_speedup"]
        prompt = [{"role": "user", "content": f"Optimize this:\n```python\n{HONEST}```"}]  # code in the prompt
        completions = [[{"role": "assistant", "content": f"```python\n{HONEST}```"}],
                       [{"role": "assistant", "content": f"```python\n{WRONG}```"}],
                       [{"role": "assistant", "content": "I copied nothing."}],
                       [{"role": "assistant", "content": f"```python\n{HONEST}```"}]]
        problems = ["1/1", "1/1", "1/1", "9/99"]  # the last names no problem of the service
        inputs = [{"prompt": prompt, "completion": c, "problem": p} for c, p in zip(completions, problems)]
        with pytest.warns(adapters.RewardWarning, match="unknown problem id '9/99'"):
            rewards = trainer._calculate_rewards(inputs, [prompt] * 4, completions, [[1]] * 4)
    finally:
        if hasattr(trainer, "async_loop"):
            from trl.trainer.grpo_trainer import shutdown_event_loop_in_daemon

            shutdown_event_loop_in_daemon(trainer.async_loop_thread, trainer.async_loop)
    assert rewards.shape == (4, 2)
    binary, speedup = rewards[:, 0].tolist(), rewards[:, 1].tolist()
    assert binary[:3] == [1.0, -0.5, 0.0] and math.isnan(binary[3])  # None: TRL leaves the sample out
    assert speedup[0] > 0 and speedup[1:3] == [0.0, 0.0] and math.isnan(speedup[3])
    assert logged_extra["kernelopt_status"] == ["correct", "incorrect", "format_error", "unscorable"]
    assert logged_metrics["kernelopt/unscorable"] == 0.25


# -- OpenRLHF, pinned formats --------------------------------------------------------------------

def _openrlhf_08_update_samples_with_rewards(rewards_info: list[dict], sizes: list[int]) -> dict:
    """What OpenRLHF 0.8.11's experience maker does with the reward answers of a step (its
    `update_samples_with_rewards`, restated): as_tensor on rewards and scores, cat on extra_logs."""
    rewards = torch.cat([torch.as_tensor(info["rewards"]) for info in rewards_info]).split(sizes)
    scores = torch.cat([torch.as_tensor(info["scores"]) for info in rewards_info]).split(sizes)
    logs = {}
    if "extra_logs" in rewards_info[0]:
        logs = {key: torch.cat([info["extra_logs"][key] for info in rewards_info]).split(sizes)
                for key in rewards_info[0]["extra_logs"]}
    return {"rewards": rewards, "scores": scores, "extra_logs": logs}


def test_openrlhf_08_merges_what_our_reward_func_returns(service_url):
    prompt = "<|im_start|>user\nWrite ModelNew for ReLU.<|im_end|>\n<|im_start|>assistant\n"
    queries = [prompt + f"```python\n{WRONG}```<|im_end|>", prompt + "no<|im_end|>", prompt[20:] + "cut"]
    chunks = [adapters.reward_func(queries[:2], [prompt] * 2, ["1/1"] * 2, url=service_url),  # per micro batch
              adapters.reward_func(queries[2:], [prompt], ["1/1"], url=service_url)]
    merged = _openrlhf_08_update_samples_with_rewards(chunks, [2, 1])
    assert [r.tolist() for r in merged["rewards"]] == [[0.0, 0.0], [0.0]]
    assert [v.tolist() for v in merged["extra_logs"]["kernelopt_unscorable"]] == [[0.0, 0.0], [1.0]]


def test_openrlhf_011_reads_one_number_per_key_from_a_single_sample_answer(service_url):
    # 0.11.2's executor calls reward_func([query], [prompt], [label]) in a thread for each rollout,
    # then makes torch.tensor([value]) of rewards and of each extra_logs value (a tensor's first item).
    prompt = "<|im_start|>user\nWrite ModelNew.<|im_end|>\n<|im_start|>assistant\n"
    info = asyncio.run(asyncio.to_thread(adapters.reward_func, [prompt + "nothing"], [prompt], ["1/1"],
                                         url=service_url))
    assert torch.tensor([info["rewards"]]).flatten().tolist() == [0.0]
    logs = {key: torch.tensor([value.flatten()[0].item()]) for key, value in info["extra_logs"].items()}
    assert logs["kernelopt_correct"].tolist() == [0.0] and logs["kernelopt_unscorable"].tolist() == [0.0]


# -- verl, pinned formats ------------------------------------------------------------------------
# verl 0.9.1 (`trainer/ppo/reward.get_custom_reward_fn`, `reward_loop/reward_manager/naive.py`)
# reads `reward.custom_reward_function.{path,name,reward_kwargs}`, loads the function from the
# file, merges reward_kwargs over the call's keywords (reward_kwargs win), awaits it when it is a
# coroutine function, and calls it with data_source, solution_str (the response tokens alone,
# decoded), ground_truth and extra_info. A dict answer gives the reward under "score" and every
# other key to its logs; a float answer is logged as "acc".

def _verl_091_reward(fn, reward_kwargs: dict):
    import functools

    if inspect.iscoroutinefunction(fn):
        async def merged(*args, **kwargs):
            return await fn(*args, **{**kwargs, **reward_kwargs})
        return merged
    return functools.partial(lambda *args, **kwargs: fn(*args, **{**kwargs, **reward_kwargs}))


def _verl_091_score(reward, **call) -> tuple[float, dict]:
    if inspect.iscoroutinefunction(reward):
        result = asyncio.run(reward(**call))
    else:
        result = reward(**call)
    if isinstance(result, dict):
        return result["score"], {key: value for key, value in result.items() if key != "score"}
    return result, {"acc": result}


def test_verl_091_reward_loop_gets_the_reward_under_score_and_correctness_under_acc(service_url):
    import importlib.util

    spec = importlib.util.spec_from_file_location("custom_module", adapters.__file__)  # path = this file
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("compute_score", "compute_score_async"):
        reward = _verl_091_reward(getattr(module, name), {"url": service_url, "reward": "speedup:incorrect=-0.25"})
        call = {"data_source": "kernelopt", "ground_truth": "1/1",
                "extra_info": {"num_turns": None, "rollout_reward_scores": {}}}
        score, extra = _verl_091_score(reward, solution_str=f"```python\n{WRONG}```", **call)
        assert score == -0.25 and extra["acc"] == 0.0 and extra["status"] == "incorrect"
        with pytest.warns(UserWarning, match="unscorable.*unknown problem id '8/88'"):  # the file's own class
            score, extra = _verl_091_score(reward, **{**call, "ground_truth": "8/88"}, solution_str="x")
        assert score == 0.0 and extra["unscorable"] == 1.0  # verl has no None: the failure reward

"""An OpenRLHF agent (0.11: `--train.agent_func_path FILE`, the `MultiTurnAgentExecutor` of
`openrlhf.utils.agent`) for multi-turn training on the referee's feedback. The file OpenRLHF
loads needs an `AgentExecutor` class; this module has one, so a one-line file will do:

    # kernel_agent.py
    from kernelopt.rewards.environments.openrlhf_agent import AgentExecutor  # noqa: F401

OpenRLHF makes one `KernelAgentInstance()` per prompt, without arguments, so the settings are
class attributes read from the environment when an instance is made: KERNELOPT_REWARD_URL (the
reward service), KERNELOPT_AGENT_REWARD (a reward spec), KERNELOPT_AGENT_MAX_TURNS (4),
KERNELOPT_AGENT_TARGET_SPEEDUP, KERNELOPT_AGENT_FAILURE_REWARD (0.0); or subclass and set them.

Each `step` judges the turn's `action_text` (the generated response alone; the label names the
problem) and answers with the verdict wrapped in the chat template's turn markers
(`feedback_template`, ChatML by default: set it to your model's). OpenRLHF adds up the steps'
rewards, so each step pays the change in the episode's reward: the sum is the episode's reward
(the best turn's by default), or `failure_reward` when no turn could be judged. "scores" is 1.0
when the best answer is correct (for dynamic filtering), "extra_logs" holds numbers only.

Without openrlhf installed (it needs vllm, ray and deepspeed) the classes still import, on plain
bases, so the interface can be tested; OpenRLHF itself requires its base classes.
"""

from __future__ import annotations

import os

import torch

from kernelopt.rewards.environments.episode import EpisodeError, KernelEpisode, check_settings

try:
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
except ImportError:  # pragma: no cover - exercised where openrlhf is not installed
    AgentInstanceBase = object
    MultiTurnAgentExecutor = None

CHATML_FEEDBACK = "<|im_end|>\n<|im_start|>user\n{feedback}<|im_end|>\n<|im_start|>assistant\n"


def _from_env(name: str, kind: type):
    """The variable's value as `kind`, None when unset or empty; a clear error when malformed."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        raise EpisodeError(f"{name}={value!r} is not {'a whole number' if kind is int else 'a number'}") from None


def _first(*values):
    return next((v for v in values if v is not None), None)


class KernelAgentInstance(AgentInstanceBase):
    """One prompt's episode, with OpenRLHF 0.11's `reset(states)` and `step(states)`."""

    url: str | None = None
    reward: str | None = None
    max_turns: int | None = None
    target_speedup: float | None = None
    failure_reward: float | None = None
    episode_reward: str = "best"
    feedback_template: str = CHATML_FEEDBACK

    def __init__(self, *args, **kwargs):
        self._settings = dict(
            url=self.url or os.environ.get("KERNELOPT_REWARD_URL"),
            reward=self.reward or os.environ.get("KERNELOPT_AGENT_REWARD") or None,
            max_turns=_first(self.max_turns, _from_env("KERNELOPT_AGENT_MAX_TURNS", int), 4),
            target_speedup=_first(self.target_speedup, _from_env("KERNELOPT_AGENT_TARGET_SPEEDUP", float)),
            episode_reward=self.episode_reward)
        self._failure = _first(self.failure_reward, _from_env("KERNELOPT_AGENT_FAILURE_REWARD", float), 0.0)
        check_settings(**self._settings)  # bad settings fail at once
        self._episode: KernelEpisode | None = None
        self._paid = 0.0

    async def reset(self, states: dict, **kwargs) -> dict:
        """A new episode on the label's problem; the observation is the prompt, unchanged."""
        self._episode = KernelEpisode(states["label"], **self._settings)
        self._paid = 0.0
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs) -> dict:
        """Judge `action_text`; the reward change, the feedback turn and whether the episode is over."""
        if self._episode is None:
            self._episode = KernelEpisode(states["label"], **self._settings)
        turn = await self._episode.step_async(states["action_text"])
        result = self._episode.result()
        value = self._failure if result is None else result
        change, self._paid = value - self._paid, value
        best = self._episode.best_answer() or {}
        return {
            "rewards": torch.tensor(change, dtype=torch.float),
            "scores": 1.0 if best.get("correct") else 0.0,
            "environment_feedback": "" if turn.done else self.feedback_template.format(feedback=turn.feedback),
            "done": turn.done,
            "extra_logs": {"kernelopt_correct": 1.0 if best.get("correct") else 0.0,
                           "kernelopt_speedup": float(best.get("speedup") or 0.0) if best.get("correct") else 0.0,
                           "kernelopt_turns": float(len(self._episode.turns)),
                           "kernelopt_unscorable": 1.0 if turn.reward is None else 0.0},
        }


if MultiTurnAgentExecutor is not None:
    class AgentExecutor(MultiTurnAgentExecutor):
        """What `--train.agent_func_path` loads: OpenRLHF's multi-turn executor on our instances."""

        def __init__(self):
            super().__init__(KernelAgentInstance)

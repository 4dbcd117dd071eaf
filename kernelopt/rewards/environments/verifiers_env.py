"""A `verifiers` environment (the classic `vf.MultiTurnEnv` API: verifiers 0.1.x to 0.3.x,
which prime-rl and `vf-eval` load) over a kernelopt problem set, judged by the reward service.

    import verifiers as vf
    env = vf.load_environment("kernelopt.rewards.environments.verifiers_env",
                              problem_set="path/to/KernelBench", levels="1", url="http://127.0.0.1:8000",
                              reward="log_speedup:clip=2", max_turns=4)

Each dataset row is one problem: its "question" is the reference program and what to answer,
its "answer" names the problem to the service (the reference source by default). In a rollout
every model answer is judged as soon as it arrives (`add_trajectory_step`, verifiers' hook for
per-turn rewards: the step's "reward" is that turn's), the next user turn is the verdict
(compile errors, the message of an incorrect answer, the speedup of a correct one) and what to
do next, and the rollout stops after `max_turns` answers or once a correct answer reaches
`target_speedup`. The rubric's reward is the episode's (the best turn's by default), with the
best answer's correctness and speedup and the number of judged turns as metrics.

Requires `verifiers` (not in kernelopt's extras: see docs/rewards.md for the install).
"""

from __future__ import annotations

from typing import Any

import verifiers as vf

from kernelopt.kernelbench import load_problem_set, parse_id_ranges
from kernelopt.rewards.environments.episode import KernelEpisode, check_settings, first_prompt, problem_label

STATE_KEY = "kernelopt_episode"


class KernelEnv(vf.MultiTurnEnv):
    """verifiers' multi-turn environment with the referee's verdict as the environment's turn."""

    def __init__(self, dataset, *, url: str | None = None, reward: str | None = None, options: dict | None = None,
                 max_turns: int = 4, target_speedup: float | None = None, episode_reward: str = "best",
                 failure_reward: float = 0.0, **kwargs):
        self.episode_settings: dict[str, Any] = dict(url=url, reward=reward, options=options, max_turns=max_turns,
                                     target_speedup=target_speedup, episode_reward=episode_reward)
        check_settings(**self.episode_settings)  # bad settings fail here, not in a rollout
        self.failure_reward = float(failure_reward)
        rubric = vf.Rubric(funcs=[self.kernelopt_reward], weights=[1.0])
        for metric in (kernelopt_correct, kernelopt_speedup, kernelopt_judged_turns):
            rubric.add_metric(metric)
        super().__init__(dataset=dataset, rubric=rubric, max_turns=max_turns, **kwargs)

    async def setup_state(self, state):
        state[STATE_KEY] = KernelEpisode(state["answer"], **self.episode_settings)
        return state

    async def add_trajectory_step(self, state, trajectory_step):
        """Judge the step's answer (its completion alone) and record that turn's reward."""
        episode: KernelEpisode = state[STATE_KEY]
        turn = await episode.step_async(messages_text(trajectory_step["completion"]))
        trajectory_step["reward"] = turn.reward
        trajectory_step["extras"]["kernelopt"] = {"status": turn.status, "reward": turn.reward,
                                                  "speedup": turn.answer.get("speedup")}
        await super().add_trajectory_step(state, trajectory_step)

    @vf.stop
    async def kernelopt_done(self, state) -> bool:
        """The episode is over: its turns are used up, or the target speedup was reached."""
        episode = state.get(STATE_KEY)
        return episode is not None and episode.done

    async def env_response(self, messages, state, **kwargs):
        """The verdict on the last answer, and what to do next."""
        episode: KernelEpisode = state[STATE_KEY]
        return [vf.UserMessage(content=episode.turns[-1].feedback)]

    async def kernelopt_reward(self, state) -> float:
        """The episode's reward (`failure_reward` when no turn could be judged)."""
        episode = state.get(STATE_KEY)
        result = episode.result() if episode is not None else None
        return self.failure_reward if result is None else result


async def kernelopt_correct(state) -> float:
    """1.0 when the episode's best answer is correct."""
    best = _best(state)
    return 1.0 if best and best.get("correct") else 0.0


async def kernelopt_speedup(state) -> float:
    """The speedup of the episode's best answer when correct, else 0.0."""
    best = _best(state)
    return float(best.get("speedup") or 0.0) if best and best.get("correct") else 0.0


async def kernelopt_judged_turns(state) -> float:
    episode = state.get(STATE_KEY)
    return float(sum(1 for t in episode.turns if t.reward is not None)) if episode is not None else 0.0


def _best(state) -> dict | None:
    episode = state.get(STATE_KEY)
    return episode.best_answer() if episode is not None else None


def messages_text(messages) -> str:
    """The assistant text of a turn's completion (verifiers' message objects or plain dicts)."""
    texts = []
    for message in messages or ():
        role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
        content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
        if role == "assistant":
            texts.append(_content_text(content))
    return "\n\n".join(texts)


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else getattr(part, "text", "") or ""
                       for part in content)
    return ""


def problem_dataset(problems, *, label: str = "source"):
    """A verifiers dataset (a `datasets.Dataset`): one row per problem, its "question" the
    first prompt, its "answer" the problem's name for the service, its "info" the problem's
    name."""
    from datasets import Dataset

    rows = [{"question": first_prompt(p), "answer": problem_label(p, label), "info": {"problem": p.name}}
            for p in problems]
    if not rows:
        raise ValueError("the problem set is empty: no environment to build")
    return Dataset.from_list(rows)


def load_environment(problem_set: str, *, levels: str | None = None, ids: str | None = None,
                     label: str = "source", url: str | None = None, reward: str | None = None,
                     options: dict | None = None, max_turns: int = 4, target_speedup: float | None = None,
                     episode_reward: str = "best", failure_reward: float = 0.0, **kwargs) -> KernelEnv:
    """verifiers' entry point: the environment over `problem_set` (a problem folder, a KernelBench
    checkout, a parquet file or a Hugging Face dataset id, as `kernelopt bench` takes it), optionally narrowed to
    `levels` and `ids` ("1,2", "1-10"). The other settings are `KernelEnv`'s; anything else
    goes to verifiers' Environment (system_prompt, sampling_args, ...)."""
    problems = load_problem_set(problem_set, levels=parse_id_ranges(levels) if levels else None,
                                ids=parse_id_ranges(ids) if ids else None).problems
    return KernelEnv(problem_dataset(problems, label=label), url=url, reward=reward, options=options,
                     max_turns=max_turns, target_speedup=target_speedup, episode_reward=episode_reward,
                     failure_reward=failure_reward, **kwargs)

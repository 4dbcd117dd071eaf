"""A TRL environment (GRPOTrainer's `environment_factory`, TRL 1.x with transformers 5.2+): the
policy tests programs with an `evaluate` tool that answers with the referee's verdict, and the
environment owns the reward (`get_reward`: the episode's, the best tested program's by default).

    from trl import GRPOConfig, GRPOTrainer
    from kernelopt.rewards.environments.trl_env import environment_factory

    trainer = GRPOTrainer(model=..., train_dataset=dataset,   # columns: "prompt", "problem"
                          environment_factory=environment_factory("http://127.0.0.1:8000",
                                                                  reward="log_speedup:clip=2", max_turns=4),
                          args=GRPOConfig(max_tool_calling_iterations=4, ...))

TRL makes one instance per rollout and reuses it across batches: `reset(**row)` starts a new
episode on the row's problem ("problem" column, else "ground_truth") and returns the note TRL
appends to the prompt. Every public method but `reset` and `get_reward` is a tool to TRL, so
`evaluate` is the only one. The factory is a `functools.partial` of the class, so it pickles.
"""

from __future__ import annotations

from typing import Any

import functools

from kernelopt.rewards.adapters import PROBLEM_COLUMNS
from kernelopt.rewards.environments.episode import EpisodeError, KernelEpisode, check_settings

NOTE = ("\n\nTest a program with the `evaluate` tool before you answer: it runs the referee and returns its "
        "verdict (compile errors, wrong results, the speedup). You can call it {turns} times; the best "
        "program you test is what counts.")


class KernelToolEnv:
    """One rollout's environment: the episode and its `evaluate` tool."""

    def __init__(self, url: str | None = None, *, reward: str | None = None, options: dict | None = None,
                 max_turns: int = 4, target_speedup: float | None = None, episode_reward: str = "best",
                 column: str | None = None):
        self._settings: dict[str, Any] = dict(url=url, reward=reward, options=options, max_turns=max_turns,
                              target_speedup=target_speedup, episode_reward=episode_reward)
        check_settings(**self._settings)  # bad settings fail when TRL probes the factory
        self._columns = (column,) if column else PROBLEM_COLUMNS
        self._episode: KernelEpisode | None = None

    def reset(self, **row) -> str:
        """A new episode on the row's problem; the note for the prompt."""
        problem = next((row[name] for name in self._columns if row.get(name)), None)
        if problem is None:
            raise EpisodeError(f"the dataset row has no problem: add a column {' or '.join(map(repr, self._columns))} "
                               "holding the reference program or a problem id of the reward service")
        self._episode = KernelEpisode(problem, **self._settings)
        return NOTE.format(turns=self._episode.max_turns)

    def evaluate(self, code: str) -> str:
        """Judge a complete program with the referee: correctness against the reference, then its speed.

        Args:
            code: The complete Python program: its imports, its kernels and class ModelNew.

        Returns:
            The referee's verdict: the status, why it failed, or the speedup of a correct program.
        """
        episode = self._current()
        if episode.done:
            return "No evaluations left in this episode: give your final answer."
        return episode.step(code).feedback

    def get_reward(self) -> float | None:
        """The episode's reward. A rollout that tested no program is judged on an empty answer
        (a format error, paid the reward's `format` value); None when the service could not
        judge any turn (TRL leaves the sample out)."""
        episode = self._current()
        if not episode.turns:
            episode.step("")
        return episode.result()

    def _current(self) -> KernelEpisode:
        if self._episode is None:
            raise EpisodeError("no episode: TRL calls reset(**row) before the rollout")
        return self._episode


def environment_factory(url: str | None = None, **settings) -> functools.partial:
    """GRPOTrainer's `environment_factory`: a picklable callable making a `KernelToolEnv` with
    these settings (`KernelToolEnv`'s keywords)."""
    return functools.partial(KernelToolEnv, url, **settings)

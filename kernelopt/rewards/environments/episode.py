"""One multi-turn episode on one problem: the policy answers, the referee judges the answer
(through the reward service, so the trainer's process never runs a candidate), the episode
says what happened and asks again, until the turns run out or a target speedup is reached.
The trainer environments (verifiers, TRL, OpenRLHF) are thin shells around `KernelEpisode`.

- Every answer is judged on its own text: the response of that turn, never the prompt or the
  conversation before it.
- An answer without a program is a `format_error` turn (the referee's message says what was
  expected), never an exception.
- A candidate that crashes, hangs or cheats is a verdict like any other. A turn the service
  cannot judge (unreachable, unknown problem, full queue until `retry_for`) is an `unscorable`
  turn with a warning: its reward is None and the episode goes on.
- The episode's reward is the best turn's reward (`episode_reward="best"`: the search keeps its
  best candidate, docs/rewards.md "Multi-turn returns") or the last turn's (`"last"`); None
  when no turn was judged.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from kernelopt.kernelbench import Problem
from kernelopt.rewards.adapters import RewardClient, RewardServiceError, RewardWarning, client_for
from kernelopt.rewards.environments.feedback import turn_feedback

EPISODE_REWARDS = ("best", "last")
FIRST_PROMPT = """Write a faster version of this PyTorch program (problem {name}).

```python
{source}
```

Define `class ModelNew(torch.nn.Module)` with the same constructor arguments and the same outputs as `Model`, \
using custom kernels where they pay. Reply with the complete program in one ```python block."""


TRAINING_NOTE = """

The referee judges a training step: the outputs and the gradients of every floating-point input and \
parameter, for a random upstream gradient, forward and backward timed together. Keep `Model`'s parameters \
(same order and shapes); autograd or a `torch.autograd.Function` with your own backward may compute the \
gradients."""


class EpisodeError(ValueError):
    """Settings an episode cannot run with; the message says what to change."""


@dataclass(frozen=True)
class Turn:
    """One judged answer: the service's answer (verdict fields, "reward", "status"), the reward
    (None when unscorable), the text the policy reads next, and whether the episode is over."""

    answer: dict
    reward: float | None
    feedback: str
    done: bool

    @property
    def status(self) -> str:
        return self.answer["status"]


class KernelEpisode:
    """The episode's state and its one operation, `step(response) -> Turn`.

    `problem` names the problem as the service's API does: a reference program or an id of the
    service's loaded set. `url`: the reward service (default: $KERNELOPT_REWARD_URL). `reward`:
    a reward spec (docs/rewards.md; default: the service's). `max_turns`: answers judged at
    most. `target_speedup`: end early once a correct answer is at least this fast (None: use
    every turn). `client`: a `RewardClient` to share (default: one per URL)."""

    def __init__(self, problem, *, url: str | None = None, reward: str | None = None, options: dict | None = None,
                 max_turns: int = 4, target_speedup: float | None = None, episode_reward: str = "best",
                 client: RewardClient | None = None):
        check_settings(max_turns=max_turns, target_speedup=target_speedup, episode_reward=episode_reward)
        if not problem:
            raise EpisodeError("no problem: pass the reference program or a problem id of the service's set")
        self.problem, self.reward_spec, self.options = problem, reward, options
        self.max_turns, self.target_speedup, self.episode_reward = max_turns, target_speedup, episode_reward
        self._client, self._url = client, url
        self.turns: list[Turn] = []

    @property
    def client(self) -> RewardClient:
        return self._client if self._client is not None else client_for(self._url)

    @property
    def done(self) -> bool:
        return bool(self.turns) and self.turns[-1].done

    def step(self, response: str) -> Turn:
        """Judge one answer (blocking) and record the turn."""
        self._check_open()
        try:
            answer = self.client.evaluate(self.problem, response or "", self.reward_spec, self.options)
        except RewardServiceError as exc:
            answer = _unscorable(exc)
        return self._record(answer)

    async def step_async(self, response: str) -> Turn:
        """`step` for an event loop (the request waits in the client's threads)."""
        self._check_open()
        try:
            answer = await self.client.evaluate_async(self.problem, response or "", self.reward_spec, self.options)
        except RewardServiceError as exc:
            answer = _unscorable(exc)
        return self._record(answer)

    def result(self) -> float | None:
        """The episode's reward: the best or the last judged turn's; None when none was judged."""
        judged = [t.reward for t in self.turns if t.reward is not None]
        if not judged:
            return None
        return max(judged) if self.episode_reward == "best" else judged[-1]

    def best_answer(self) -> dict | None:
        judged = [t for t in self.turns if t.reward is not None]
        return max(judged, key=lambda t: t.reward if t.reward is not None else float("-inf")).answer if judged else None

    def _check_open(self) -> None:
        if self.done:
            raise EpisodeError(f"the episode is over after {len(self.turns)} turns; start a new one")

    def _record(self, answer: dict) -> Turn:
        unscorable = answer["status"] == "unscorable"
        reward = None if unscorable else float(answer["reward"])
        last = len(self.turns) + 1 >= self.max_turns or self._reached_target(answer)
        turn = Turn(answer, reward, turn_feedback(answer, last=last), last)
        self.turns.append(turn)
        return turn

    def _reached_target(self, answer: dict) -> bool:
        return (self.target_speedup is not None and answer["status"] == "correct"
                and (answer.get("speedup") or 0.0) >= self.target_speedup)


def check_settings(*, max_turns: int = 4, target_speedup: float | None = None, episode_reward: str = "best",
                   **_) -> None:
    """Refuse settings no episode can run with (the environments check them when built, before
    any rollout); other keywords are ignored."""
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise EpisodeError(f"max_turns must be a whole number of at least 1, not {max_turns!r}")
    if episode_reward not in EPISODE_REWARDS:
        raise EpisodeError(f"episode_reward must be one of {', '.join(EPISODE_REWARDS)}, not {episode_reward!r}")
    if target_speedup is not None and not target_speedup > 0:
        raise EpisodeError(f"target_speedup must be above 0 (or None), not {target_speedup!r}")


def _unscorable(error: RewardServiceError) -> dict:
    warnings.warn(f"kernelopt: a turn is unscorable: {error}", RewardWarning, stacklevel=3)
    return {"status": "unscorable", "reward": None, "correct": False, "speedup": None, "flags": [],
            "speedup_interval": None, "message": f"the referee could not judge this answer: {error}"}


def first_prompt(problem: Problem) -> str:
    """The opening user message of an episode on `problem`: the reference and what to answer."""
    prompt = FIRST_PROMPT.format(name=problem.name, source=problem.shown_source.strip())
    return prompt + (TRAINING_NOTE if problem.training_pass != "forward" else "")


def problem_label(problem: Problem, label: str = "source") -> str:
    """How a dataset row names its problem to the service: "source" (the reference program,
    any service can judge it) or "id" (the "level/id" of the service's loaded set)."""
    if label == "source":
        return problem.source
    if label == "id":
        if problem.problem_id is None:
            return problem.name
        return f"{problem.level}/{problem.problem_id}" if problem.level is not None else str(problem.problem_id)
    raise EpisodeError(f'label must be "source" or "id", not {label!r}')

"""Search strategies: how to spend the budget on prompts, and the `STRATEGIES` registry.

A strategy has no loop of its own. The search loop (search.py, `search_loop`) asks it for one
round at a time: `next_round(pipeline, progress)` gives the asks to start now (an iterable,
consumed in order, each ask started as soon as it is built), or None when it has nothing more to
ask. The loop then waits for the whole round, or, for a strategy with a `window`, until one of
its attempts finishes. Every strategy decides only from finished attempts and a seeded RNG, so a
resumed run replays the same decisions (see attempt.py).

- best-of-n: independent samples of the first prompt, `window` in flight at a time.
- refine: one attempt at a time, each prompt carrying the last verdict and the history.
- tree: expands the `beam` nodes whose subtree holds the highest score (max-reward, as in
  MaxCode: a node is worth the best result reachable through it), `width` children each, down
  to `depth`.
- evolve: a population per generation; each child starts from a parent chosen by tournament
  and sees exemplars sampled across score buckets (CUDA-L1's contrastive prompts).
- samples: `samples` independent chains, each a first attempt refined `turns` more times with
  its own feedback only (for datasets: `kernelopt generate`); the chains advance in lockstep.
- agent: one tool-calling conversation per round (conversation.py), the referee behind its tools.

Every strategy orders candidates by `Attempt.rank`, the lower end of a speedup's 95 % interval
(agent/selection.py), not by the speedup's point reading: a lucky reading does not lead.

This module imports nothing heavy (the attempt pipeline only for type checking), so the command
line takes the `--strategy` choices from `STRATEGIES` without loading torch.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from kernelopt.agent.attempt import Attempt, AttemptPipeline

HISTORY_LIMIT = 12
SCORE_BUCKETS = (0.0, 1.0, 1.5)   # failed | slower than the reference | up to 1.5x | beyond


@dataclass
class Ask:
    """One attempt a strategy wants started: its prompt, the attempt it builds on, and the
    strategy's own data (stored with the candidate: depth, generation, sample, turn, ...)."""

    messages: list[dict]
    parent: Attempt | None = None
    data: dict = field(default_factory=dict)
    # An ask that runs itself (a tool-calling conversation, conversation.py) instead of one LLM call:
    # a future of its work, or None when the budget refused it.
    start: Callable[[AttemptPipeline], Future | None] | None = None


@dataclass(frozen=True)
class Progress:
    """What the search loop tells a strategy before each round."""

    round: int = 0       # 0 for the first round
    refused: int = 0     # asks of the previous round the budget refused
    in_flight: int = 0   # attempts still running (only a strategy with a window has any)


class Strategy(Protocol):
    # A dataclass: make_strategy sets its fields from the run's strategy options.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    @property
    def name(self) -> str: ...

    # None: the loop waits for each round to finish. n: the loop keeps up to n attempts in
    # flight and asks for the next round as soon as one of them finishes.
    @property
    def window(self) -> int | None: ...

    def next_round(self, pipeline: AttemptPipeline, progress: Progress) -> Iterator[Ask] | None: ...


def first_messages(pipeline: AttemptPipeline, hint: str | None = None) -> list[dict]:
    """`hint`: an engineer's suggestion for the model (interactive sessions; None otherwise)."""
    return pipeline.prompts.messages("first_attempt.j2", hint=hint)


def refine_messages(pipeline: AttemptPipeline, last: Attempt, history: list[Attempt],
                    diagnosis: str | None = None, best: Attempt | None = None,
                    hint: str | None = None) -> list[dict]:
    """`best`: the version shown as the best so far (default: the run's best); `hint`: as for
    first_messages."""
    best = best or pipeline.best()
    shown_best = best.view() if best is not None and best is not last else None
    return pipeline.prompts.messages(
        "refine.j2", last=last.view(), best=shown_best, diagnosis=diagnosis,
        history=[a.view() for a in history[-HISTORY_LIMIT:]], hint=hint)


def diagnose(pipeline: AttemptPipeline, attempt: Attempt, enabled: bool) -> str | None:
    return pipeline.critique(attempt) if enabled and attempt.status != "llm_error" else None


@dataclass
class BestOfN:
    window: int = 4
    name: str = "best-of-n"

    def next_round(self, pipeline: AttemptPipeline, progress: Progress) -> Iterator[Ask] | None:
        if progress.refused:   # the budget is spent: let what is in flight finish
            return None
        return self._samples(pipeline, self.window - progress.in_flight)

    def _samples(self, pipeline: AttemptPipeline, count: int) -> Iterator[Ask]:
        for _ in range(count):
            # read as each ask is started: the sample's number is its attempt's position
            yield Ask(first_messages(pipeline), data={"sample": len(pipeline.attempts)})


@dataclass
class Refine:
    critique: bool = False
    name: str = "refine"
    window: ClassVar[None] = None
    profiles: ClassVar[bool] = True  # a correct candidate's profile goes into the next prompt

    def next_round(self, pipeline: AttemptPipeline, progress: Progress) -> Iterator[Ask] | None:
        turn = progress.round
        responded = pipeline.judged()
        if not responded:   # nothing came back yet (failed calls): start over
            return iter([Ask(first_messages(pipeline), data={"turn": turn})])
        last = responded[-1]
        diagnosis = diagnose(pipeline, last, self.critique)
        messages = refine_messages(pipeline, last, responded[:-1], diagnosis)
        return iter([Ask(messages, parent=last, data={"turn": turn})])


@dataclass
class Tree:
    width: int = 2
    depth: int = 4
    beam: int = 1
    critique: bool = False
    name: str = "tree"
    window: ClassVar[None] = None
    profiles: ClassVar[bool] = True  # a correct candidate's profile goes into the next prompt
    # The nodes chosen for expansion so far (never chosen twice, even when the budget refused
    # their children). Per-run state: make_strategy builds a fresh Tree for every run, and a
    # resumed run rebuilds it by replaying the same rounds.
    _expanded: set[int] = field(default_factory=set, init=False, repr=False, compare=False)

    def next_round(self, pipeline: AttemptPipeline, progress: Progress) -> Iterator[Ask] | None:
        if progress.round == 0:
            return (Ask(first_messages(pipeline), data={"depth": 1}) for _ in range(self.width))
        if pipeline.stop_reason():
            return None
        frontier = [a for a in pipeline.judged()
                    if a.data.get("depth", 1) < self.depth and a.index not in self._expanded]
        if not frontier:
            return None
        values = subtree_values(pipeline.attempts)
        chosen = sorted(frontier, key=lambda a: (-values[a.index], -a.rank, a.index))[:self.beam]
        return self._children(pipeline, chosen)

    def _children(self, pipeline: AttemptPipeline, chosen: list[Attempt]) -> Iterator[Ask]:
        for node in chosen:
            self._expanded.add(node.index)
            diagnosis = diagnose(pipeline, node, self.critique)
            messages = refine_messages(pipeline, node, ancestors(node), diagnosis)
            depth = node.data.get("depth", 1) + 1
            for _ in range(self.width):
                yield Ask(messages, parent=node, data={"depth": depth})


def subtree_values(attempts: list[Attempt]) -> dict[int, float]:
    """Max-reward value: the best rank in each attempt's subtree."""
    values = {a.index: a.rank for a in attempts}
    for a in sorted(attempts, key=lambda a: -a.index):   # children come after their parents
        if a.parent is not None:
            values[a.parent.index] = max(values[a.parent.index], values[a.index])
    return values


def ancestors(attempt: Attempt) -> list[Attempt]:
    chain, node = [], attempt.parent
    while node is not None:
        chain.append(node)
        node = node.parent
    return chain[::-1]


@dataclass
class Evolve:
    population: int = 4
    exemplars: int = 3
    tournament: int = 2
    seed: int = 0
    critique: bool = False
    name: str = "evolve"
    window: ClassVar[None] = None
    profiles: ClassVar[bool] = True  # a correct candidate's profile goes into the next prompt

    def next_round(self, pipeline: AttemptPipeline, progress: Progress) -> Iterator[Ask] | None:
        generation = progress.round
        if generation == 0:
            return self._fresh(pipeline, generation)
        if pipeline.stop_reason():
            return None
        archive = [a for a in pipeline.judged() if a.code]
        if not archive:   # nothing to evolve from yet: sample afresh
            return self._fresh(pipeline, generation)
        rng = random.Random(f"{self.seed}:{generation}")
        return (self._child(pipeline, rng, archive, generation) for _ in range(self.population))

    def _fresh(self, pipeline: AttemptPipeline, generation: int) -> Iterator[Ask]:
        return (Ask(first_messages(pipeline), data={"generation": generation}) for _ in range(self.population))

    def _child(self, pipeline: AttemptPipeline, rng: random.Random, archive: list[Attempt],
               generation: int) -> Ask:
        parent = max(rng.sample(archive, min(self.tournament, len(archive))),
                     key=lambda a: (a.rank, -a.index))
        others = [a for a in archive if a is not parent]
        exemplars = sample_across_buckets(rng, others, self.exemplars)
        diagnosis = diagnose(pipeline, parent, self.critique)
        messages = pipeline.prompts.messages(
            "contrastive.j2", parent=parent.view(), diagnosis=diagnosis,
            exemplars=[e.view() for e in sorted(exemplars, key=lambda a: (a.score, a.index))])
        return Ask(messages, parent=parent,
                   data={"generation": generation, "exemplars": [e.index for e in exemplars]})


@dataclass
class Samples:
    """K independent chains of 1 + T turns: chain k's turn t+1 refines its own last answer with
    the referee's feedback and sees nothing of the other chains, so the chains are K honest
    samples of a multi-turn episode (each attempt's parent is the chain's previous answer)."""

    samples: int = 4
    turns: int = 0
    critique: bool = False
    name: str = "samples"
    window: ClassVar[None] = None

    def next_round(self, pipeline: AttemptPipeline, progress: Progress) -> Iterator[Ask] | None:
        turn = progress.round
        if turn > self.turns:
            return None
        return (self._next(pipeline, sample, turn) for sample in range(self.samples))

    def _next(self, pipeline: AttemptPipeline, sample: int, turn: int) -> Ask:
        data = {"sample": sample, "turn": turn}
        chain = [a for a in pipeline.attempts if a.data.get("sample") == sample]
        answered = [a for a in chain if a.status not in ("llm_error", "not_evaluated")]
        if not answered:   # nothing came back in this chain yet: a fresh first attempt
            return Ask(first_messages(pipeline), data=data)
        last = answered[-1]
        from kernelopt.agent.selection import leader  # on use: this module stays light for the CLI

        best = leader(answered)  # this chain's own best, chosen as the run's is
        diagnosis = diagnose(pipeline, last, self.critique)
        messages = refine_messages(pipeline, last, answered[:-1], diagnosis, best=best or last)
        return Ask(messages, parent=last, data=data)


@dataclass
class Agent:
    """One tool-calling conversation per attempt (conversation.py): the model evaluates, profiles and
    submits programs through the referee's tools (tools.py) for up to `turns` replies. Each
    conversation starts afresh; `best()` shows it the run's best so far."""

    turns: int = 8
    name: str = "agent"
    window: ClassVar[None] = None
    profiles: ClassVar[bool] = True  # profile(code) shows a correct candidate's profile

    def next_round(self, pipeline: AttemptPipeline, progress: Progress) -> Iterator[Ask] | None:
        if progress.round and pipeline.stop_reason():
            return None
        from kernelopt.agent.conversation import start_conversation

        turns = self.turns
        messages = pipeline.prompts.messages("agent.j2")
        return iter([Ask(messages, start=lambda p: start_conversation(p, messages, turns))])


def score_bucket(score: float) -> int:
    return sum(score > edge for edge in SCORE_BUCKETS)


def sample_across_buckets(rng: random.Random, attempts: list[Attempt], count: int) -> list[Attempt]:
    """Up to `count` attempts, from as many different score buckets as possible."""
    buckets: dict[int, list[Attempt]] = {}
    for a in attempts:
        buckets.setdefault(score_bucket(a.score), []).append(a)
    order = sorted(buckets, reverse=True)   # the best buckets first when not all fit
    picked: list[Attempt] = []
    while len(picked) < count and any(buckets.values()):
        for bucket in order:
            if buckets[bucket] and len(picked) < count:
                picked.append(buckets[bucket].pop(rng.randrange(len(buckets[bucket]))))
    return picked


# The registry: a strategy's name (its `--strategy` choice, stored with each run) -> its class.
# A new strategy is a class with `name`, `window` and `next_round`, added here.
STRATEGIES: dict[str, type[Strategy]] = {
    "best-of-n": BestOfN,
    "refine": Refine,
    "tree": Tree,
    "evolve": Evolve,
    "samples": Samples,
    "agent": Agent,
}


def with_eval_defaults(name: str, eval_options: dict) -> dict:
    """A run's evaluation settings with its strategy's defaults: the strategies that show the
    model its earlier candidates (refine, tree, evolve: `profiles`) profile the correct ones,
    unless the run says otherwise (--no-profile)."""
    return {"profile": bool(getattr(STRATEGIES.get(name), "profiles", False)), **eval_options}


def make_strategy(name: str, **options) -> Strategy:
    """A fresh strategy for one run. `options`: the run's strategy options (window, width, depth,
    beam, population, exemplars, seed, samples, turns, critique); each strategy takes the ones it
    has, and its own defaults stand for the rest."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}: choose one of {', '.join(STRATEGIES)}")
    cls = STRATEGIES[name]
    settable = {f.name for f in dataclasses.fields(cls) if f.init and f.name != "name"}
    return cls(**{key: value for key, value in options.items() if key in settable})

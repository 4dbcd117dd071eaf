"""Search strategies: how to spend the budget on prompts. One interface, `run(search)`.

Every strategy decides only from finished batches of attempts and a seeded RNG, so a resumed run
replays the same decisions (see engine.py). Within a batch, LLM calls overlap with evaluations.

- best-of-n: independent samples of the first prompt, `window` in flight at a time.
- refine: one attempt at a time, each prompt carrying the last verdict and the history.
- tree: expands the `beam` nodes whose subtree holds the highest score (max-reward, as in
  MaxCode: a node is worth the best result reachable through it), `width` children each, down
  to `depth`.
- evolve: a population per generation; each child starts from a parent chosen by tournament
  and sees exemplars sampled across score buckets (CUDA-L1's contrastive prompts).
- samples: `samples` independent chains, each a first attempt refined `turns` more times with
  its own feedback only (for datasets: `kernelopt generate`); the chains advance in lockstep.
"""

from __future__ import annotations

import random
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass
from typing import Protocol

from kernelopt.agent.attempt import Attempt, Search

HISTORY_LIMIT = 12
SCORE_BUCKETS = (0.0, 1.0, 1.5)   # failed | slower than the reference | up to 1.5x | beyond


class Strategy(Protocol):
    name: str

    def run(self, search: Search) -> None: ...


def first_messages(search: Search) -> list[dict]:
    return search.prompts.messages("first_attempt.j2")


def refine_messages(search: Search, last: Attempt, history: list[Attempt],
                    diagnosis: str | None = None, best: Attempt | None = None) -> list[dict]:
    """`best`: the version shown as the best so far (default: the run's best)."""
    best = best or search.best()
    shown_best = best.view() if best is not None and best is not last else None
    return search.prompts.messages(
        "refine.j2", last=last.view(), best=shown_best, diagnosis=diagnosis,
        history=[a.view() for a in history[-HISTORY_LIMIT:]])


def diagnose(search: Search, attempt: Attempt, enabled: bool) -> str | None:
    return search.critique(attempt) if enabled and attempt.status != "llm_error" else None


@dataclass
class BestOfN:
    window: int = 4
    name: str = "best-of-n"

    def run(self, search: Search) -> None:
        messages = first_messages(search)
        in_flight = set()
        while True:
            while len(in_flight) < self.window:
                future = search.attempt(messages, data={"sample": len(search.attempts)})
                if future is None:
                    search.wait(list(in_flight))
                    return
                in_flight.add(future)
            finished, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)


@dataclass
class Refine:
    critique: bool = False
    name: str = "refine"

    def run(self, search: Search) -> None:
        turn = 0
        future = search.attempt(first_messages(search), data={"turn": turn})
        while future is not None:
            future.result()
            turn += 1
            responded = search.judged()
            if not responded:   # nothing came back yet (failed calls): start over
                future = search.attempt(first_messages(search), data={"turn": turn})
                continue
            last = responded[-1]
            diagnosis = diagnose(search, last, self.critique)
            messages = refine_messages(search, last, responded[:-1], diagnosis)
            future = search.attempt(messages, parent=last, data={"turn": turn})


@dataclass
class Tree:
    width: int = 2
    depth: int = 4
    beam: int = 1
    critique: bool = False
    name: str = "tree"

    def run(self, search: Search) -> None:
        roots = [search.attempt(first_messages(search), data={"depth": 1}) for _ in range(self.width)]
        search.wait(roots)
        expanded: set[int] = set()
        while not search.stop_reason():
            frontier = [a for a in search.judged()
                        if a.data.get("depth", 1) < self.depth and a.index not in expanded]
            if not frontier:
                return
            values = subtree_values(search.attempts)
            chosen = sorted(frontier, key=lambda a: (-values[a.index], -a.score, a.index))[:self.beam]
            batch = []
            for node in chosen:
                expanded.add(node.index)
                diagnosis = diagnose(search, node, self.critique)
                messages = refine_messages(search, node, ancestors(node), diagnosis)
                depth = node.data.get("depth", 1) + 1
                batch += [search.attempt(messages, parent=node, data={"depth": depth})
                          for _ in range(self.width)]
            search.wait(batch)


def subtree_values(attempts: list[Attempt]) -> dict[int, float]:
    """Max-reward value: the best score in each attempt's subtree."""
    values = {a.index: a.score for a in attempts}
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

    def run(self, search: Search) -> None:
        search.wait([search.attempt(first_messages(search), data={"generation": 0})
                     for _ in range(self.population)])
        generation = 1
        while not search.stop_reason():
            rng = random.Random(f"{self.seed}:{generation}")
            archive = [a for a in search.judged() if a.code]
            if not archive:   # nothing to evolve from yet: sample afresh
                batch = [search.attempt(first_messages(search), data={"generation": generation})
                         for _ in range(self.population)]
            else:
                batch = [self._child(search, rng, archive, generation) for _ in range(self.population)]
            if not any(batch):
                return
            search.wait(batch)
            generation += 1

    def _child(self, search: Search, rng: random.Random, archive: list[Attempt], generation: int):
        parent = max(rng.sample(archive, min(self.tournament, len(archive))),
                     key=lambda a: (a.score, -a.index))
        others = [a for a in archive if a is not parent]
        exemplars = sample_across_buckets(rng, others, self.exemplars)
        diagnosis = diagnose(search, parent, self.critique)
        messages = search.prompts.messages(
            "contrastive.j2", parent=parent.view(), diagnosis=diagnosis,
            exemplars=[e.view() for e in sorted(exemplars, key=lambda a: (a.score, a.index))])
        return search.attempt(messages, parent=parent,
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

    def run(self, search: Search) -> None:
        chains: list[list[Attempt]] = [[] for _ in range(self.samples)]
        for turn in range(self.turns + 1):
            futures = [self._next(search, chain, sample, turn) for sample, chain in enumerate(chains)]
            for chain, attempt in zip(chains, [f.result() if f else None for f in futures]):
                if attempt is not None:
                    chain.append(attempt)
            if not any(futures):
                return

    def _next(self, search: Search, chain: list[Attempt], sample: int, turn: int):
        data = {"sample": sample, "turn": turn}
        answered = [a for a in chain if a.status not in ("llm_error", "not_evaluated")]
        if not answered:   # nothing came back in this chain yet: a fresh first attempt
            return search.attempt(first_messages(search), data=data)
        last = answered[-1]
        correct = [a for a in answered if a.correct]
        best = max(correct, key=lambda a: (a.score, -a.index)) if correct else None
        diagnosis = diagnose(search, last, self.critique)
        messages = refine_messages(search, last, answered[:-1], diagnosis, best=best or last)
        return search.attempt(messages, parent=last, data=data)


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


STRATEGIES = ("best-of-n", "refine", "tree", "evolve", "samples")


def make_strategy(name: str, *, window: int = 4, width: int = 2, depth: int = 4, beam: int = 1,
                  population: int = 4, exemplars: int = 3, seed: int = 0, samples: int = 4,
                  turns: int = 0, critique: bool = False) -> Strategy:
    if name == "best-of-n":
        return BestOfN(window=window)
    if name == "refine":
        return Refine(critique=critique)
    if name == "tree":
        return Tree(width=width, depth=depth, beam=beam, critique=critique)
    if name == "evolve":
        return Evolve(population=population, exemplars=exemplars, seed=seed, critique=critique)
    if name == "samples":
        return Samples(samples=samples, turns=turns, critique=critique)
    raise ValueError(f"unknown strategy {name!r}: choose one of {', '.join(STRATEGIES)}")

"""The pure parts of the search strategies: tree values, ancestry, exemplar sampling, buckets."""

from __future__ import annotations

import random

import pytest

from kernelopt.agent.attempt import Attempt
from kernelopt.agent.strategies import (
    SCORE_BUCKETS,
    STRATEGIES,
    BestOfN,
    Evolve,
    Refine,
    Tree,
    ancestors,
    make_strategy,
    sample_across_buckets,
    score_bucket,
    subtree_values,
)
from kernelopt.sandbox.results import EvalResult


def node(index: int, speedup: float | None = None, parent: Attempt | None = None) -> Attempt:
    """An attempt scoring `speedup` (a correct result), or a failed one (score 0) when None."""
    if speedup is None:
        result = EvalResult(status="incorrect", correct=False)
    else:
        result = EvalResult(status="correct", correct=True, speedup=speedup, reference_ms=1,
                            candidate_ms=1 / speedup)
    return Attempt(index=index, parent=parent, code=f"# {index}", result=result)


# subtree_values and ancestors -------------------------------------------------------------------


def test_subtree_value_is_the_best_score_below_a_node():
    #        1 (1.0)
    #       /       \
    #   2 (0.5)    3 (fail)
    #   /    \         \
    # 4 (3.0) 5 (0.2)   6 (1.5)
    #                     \
    #                      7 (fail)
    a1 = node(1, 1.0)
    a2 = node(2, 0.5, a1)
    a3 = node(3, None, a1)
    a4 = node(4, 3.0, a2)
    a5 = node(5, 0.2, a2)
    a6 = node(6, 1.5, a3)
    a7 = node(7, None, a6)
    values = subtree_values([a1, a2, a3, a4, a5, a6, a7])
    assert values == {1: 3.0, 2: 3.0, 3: 1.5, 4: 3.0, 5: 0.2, 6: 1.5, 7: 0.0}


def test_subtree_values_do_not_depend_on_list_order():
    a1 = node(1, 1.0)
    a2 = node(2, None, a1)
    a3 = node(3, 2.0, a2)
    a4 = node(4, 0.9)
    expected = {1: 2.0, 2: 2.0, 3: 2.0, 4: 0.9}
    assert subtree_values([a1, a2, a3, a4]) == expected
    assert subtree_values([a4, a3, a2, a1]) == expected
    assert subtree_values([a2, a4, a1, a3]) == expected


def test_subtree_values_propagate_up_a_deep_chain():
    chain = [node(1, 0.5)]
    for i in range(2, 51):
        chain.append(node(i, None if i % 2 else 0.1, chain[-1]))
    chain.append(node(51, 4.0, chain[-1]))
    values = subtree_values(chain)
    assert all(values[a.index] == 4.0 for a in chain)


def test_subtree_values_of_separate_roots_stay_separate():
    r1, r2 = node(1, 1.1), node(2, 0.3)
    c = node(3, 5.0, r2)
    assert subtree_values([r1, r2, c]) == {1: 1.1, 2: 5.0, 3: 5.0}
    assert subtree_values([]) == {}


def test_ancestors_are_listed_root_first():
    root = node(1, 1.0)
    mid = node(2, None, root)
    leaf = node(3, 1.2, mid)
    deeper = node(4, 1.3, leaf)
    assert ancestors(root) == []
    assert ancestors(mid) == [root]
    assert ancestors(deeper) == [root, mid, leaf]
    assert [a.index for a in ancestors(deeper)] == [1, 2, 3]


# score buckets and sampling ---------------------------------------------------------------------


@pytest.mark.parametrize("score, bucket", [(0.0, 0), (0.5, 1), (1.0, 1), (1.2, 2), (1.5, 2), (1.51, 3),
                                           (2.0, 3), (100.0, 3)])
def test_score_bucket_edges(score, bucket):
    assert score_bucket(score) == bucket


def test_score_bucket_edges_constant():
    assert SCORE_BUCKETS == (0.0, 1.0, 1.5)


def population() -> list[Attempt]:
    """Three attempts in each of the four buckets."""
    scores = {0: [None, None, None], 1: [0.2, 0.6, 0.9], 2: [1.1, 1.3, 1.4], 3: [1.8, 2.5, 4.0]}
    attempts, index = [], 1
    for bucket_scores in scores.values():
        for s in bucket_scores:
            attempts.append(node(index, s))
            index += 1
    return attempts


@pytest.mark.parametrize("seed", range(5))
def test_sampling_takes_one_per_bucket_first(seed):
    attempts = population()
    picked = sample_across_buckets(random.Random(seed), attempts, 4)
    assert len(picked) == 4
    assert sorted(score_bucket(a.score) for a in picked) == [0, 1, 2, 3]
    assert len({a.index for a in picked}) == 4


@pytest.mark.parametrize("seed", range(5))
def test_sampling_second_round_prefers_the_best_buckets(seed):
    attempts = population()
    picked = sample_across_buckets(random.Random(seed), attempts, 6)
    buckets = [score_bucket(a.score) for a in picked]
    assert buckets[:4] == [3, 2, 1, 0]  # one from each, best bucket first
    assert buckets[4:] == [3, 2]        # then a second from the best buckets
    assert len({a.index for a in picked}) == 6


def test_sampling_respects_count_and_the_population():
    attempts = population()
    rng = random.Random(1)
    assert sample_across_buckets(rng, attempts, 0) == []
    assert len(sample_across_buckets(rng, attempts, 1)) == 1
    assert score_bucket(sample_across_buckets(random.Random(2), attempts, 1)[0].score) == 3
    everything = sample_across_buckets(rng, attempts, 50)
    assert sorted(a.index for a in everything) == [a.index for a in attempts]
    assert sample_across_buckets(rng, [], 3) == []


def test_sampling_with_uneven_buckets_fills_from_what_is_left():
    lonely = node(1, 3.0)
    failures = [node(i, None) for i in range(2, 7)]
    picked = sample_across_buckets(random.Random(0), [*failures, lonely], 4)
    assert picked[0] is lonely
    assert [score_bucket(a.score) for a in picked] == [3, 0, 0, 0]
    assert len({a.index for a in picked}) == 4


def test_sampling_is_deterministic_for_a_seed_and_leaves_the_input_alone():
    attempts = population()
    before = list(attempts)
    first = sample_across_buckets(random.Random("7:3"), attempts, 7)
    second = sample_across_buckets(random.Random("7:3"), attempts, 7)
    assert [a.index for a in first] == [a.index for a in second]
    assert attempts == before
    others = {tuple(a.index for a in sample_across_buckets(random.Random(s), attempts, 7)) for s in range(20)}
    assert len(others) > 1  # the seed matters: choices within a bucket are random


# make_strategy ------------------------------------------------------------------------------------


def test_make_strategy_builds_each_strategy():
    best = make_strategy("best-of-n", window=3)
    assert isinstance(best, BestOfN) and best.window == 3 and best.name == "best-of-n"

    refine = make_strategy("refine", critique=True)
    assert isinstance(refine, Refine) and refine.critique and refine.name == "refine"

    tree = make_strategy("tree", width=3, depth=5, beam=2, critique=True)
    assert isinstance(tree, Tree)
    assert (tree.width, tree.depth, tree.beam, tree.critique, tree.name) == (3, 5, 2, True, "tree")

    evolve = make_strategy("evolve", population=6, exemplars=2, seed=42)
    assert isinstance(evolve, Evolve)
    assert (evolve.population, evolve.exemplars, evolve.seed, evolve.critique, evolve.name) == (
        6, 2, 42, False, "evolve")

    assert [make_strategy(name).name for name in STRATEGIES] == list(STRATEGIES)


def test_make_strategy_defaults():
    assert make_strategy("best-of-n").window == 4
    tree = make_strategy("tree")
    assert (tree.width, tree.depth, tree.beam, tree.critique) == (2, 4, 1, False)
    evolve = make_strategy("evolve")
    assert (evolve.population, evolve.exemplars, evolve.seed, evolve.tournament) == (4, 3, 0, 2)


def test_unknown_strategy_names_the_choices():
    with pytest.raises(ValueError) as info:
        make_strategy("beam-search")
    message = str(info.value)
    assert "'beam-search'" in message
    for name in ("best-of-n", "refine", "tree", "evolve"):
        assert name in message

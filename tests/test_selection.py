"""Selection that survives noise: candidates ranked by the lower end of their speedup's interval,
and a new leader judged twice, keeping the lower reading (kernelopt/agent/selection.py)."""

from __future__ import annotations

import pytest

from kernelopt.agent.attempt import Attempt
from kernelopt.agent.selection import conservative_speedup, head_to_head, leader
from kernelopt.agent.strategies import subtree_values
from kernelopt.sandbox.results import EvalResult, HeadToHead, Timing, TimingStats


def verdict(speedup: float | None, precision: float | None = None, status: str = "correct") -> EvalResult:
    stats = TimingStats(samples=10, median_ms=1, mean_ms=1, std_ms=0, min_ms=1, max_ms=1, p25_ms=1, p75_ms=1,
                        rel_iqr=0)
    timing = Timing(method="test", reference=stats, candidate=stats, rounds=5, calls_per_round=2, reference_ms=1.0,
                    candidate_ms=1.0 / speedup if speedup else 1.0, speedup_precision=precision)
    return EvalResult(status=status, correct=status == "correct", speedup=speedup if status == "correct" else None,
                      reference_ms=1.0, candidate_ms=1.0, timing=timing, message="judged")


def test_the_conservative_speedup_is_the_interval_s_lower_end():
    assert conservative_speedup(verdict(2.0, 0.1)) == pytest.approx(1.8)
    assert conservative_speedup(verdict(2.0, None)) == 2.0  # no interval: the reading itself
    assert conservative_speedup(verdict(None, status="incorrect")) == 0.0


def test_a_wide_lucky_reading_ranks_below_a_narrow_steady_one():
    lucky = Attempt(index=1, code="a", result=verdict(2.7, 0.4))   # [1.62, 3.78]
    steady = Attempt(index=2, code="b", result=verdict(2.0, 0.05))  # [1.90, 2.10]
    assert lucky.score > steady.score and steady.rank > lucky.rank
    assert subtree_values([lucky, steady]) == {1: pytest.approx(1.62), 2: pytest.approx(1.9)}  # tree's values


def test_head_to_head_keeps_the_lower_reading_and_lists_both():
    kept = head_to_head(verdict(2.7, 0.1), verdict(1.9, 0.1))
    assert kept.speedup == 1.9 and kept.timing.speedups_measured == [2.7, 1.9]
    assert "judged twice as a new leader: 2.700x, 1.900x" in kept.message
    assert head_to_head(verdict(1.9, 0.1), verdict(2.7, 0.1)).speedup == 1.9
    # The reading decides, not the interval: a higher reading with a wider interval (lower end
    # 8.85 * 0.71 = 6.28 < 8.60 * 0.8 = 6.88) is still the higher reading and is not kept.
    assert head_to_head(verdict(8.85, 0.29), verdict(8.60, 0.2)).speedup == 8.60


def test_a_second_verdict_that_is_not_correct_wins():
    kept = head_to_head(verdict(2.0, 0.1), verdict(None, status="incorrect"))
    assert kept.status == "incorrect" and not kept.correct


def test_an_optimize_run_measures_a_challenger_head_to_head_with_the_leader(monkeypatch, capsys, tmp_path):
    """Through the real pipeline: the first correct candidate (the reference's own code) takes
    the lead, so it is judged twice, with no leader to measure against; the faster one that
    would take the lead from it is judged twice with the leader judged again between, and keeps
    the lower reading; the same code proposed again is not judged anew."""
    import hashlib
    import json
    import sqlite3

    from conftest import REPO, SOFTMAX_EQUAL, SOFTMAX_FAST
    from llm_server import ScriptedLLMServer

    from kernelopt.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    answers = [f"```python\n{code}```" for code in (SOFTMAX_EQUAL, SOFTMAX_FAST, SOFTMAX_FAST)]
    store = tmp_path / "s.sqlite"
    with ScriptedLLMServer(answers) as server:
        code = main(["optimize", str(REPO / "examples" / "level1" / "4_RedundantSoftmax.py"), "--model", "test-model",
                     "--base-url", server.url, "--store", str(store), "--budget", "3", "--strategy", "best-of-n",
                     "--window", "1", "--device", "cpu", "--timing-budget", "1", "--correctness-trials", "2"])
    assert code == 0, capsys.readouterr().err
    rows = sqlite3.connect(store).execute("SELECT result FROM evaluations ORDER BY id").fetchall()
    equal, fast = (json.loads(r[0]) for r in rows)
    assert len(equal["timing"]["speedups_measured"]) == 2 and equal["timing"]["incumbent"] is None
    assert len(fast["timing"]["speedups_measured"]) == 2 and "judged twice as a new leader" in fast["message"]
    assert fast["speedup"] == pytest.approx(min(fast["timing"]["speedups_measured"]), rel=1e-5)
    incumbent = fast["timing"]["incumbent"]
    assert incumbent["index"] == 1 and incumbent["code_hash"] == hashlib.sha256(SOFTMAX_EQUAL.encode()).hexdigest()
    assert 0.5 < incumbent["speedup"] < 2.0  # the reference's own code, read again: about 1x
    assert "the leader (attempt 1) read" in fast["message"]


def test_the_lead_changes_only_to_a_clearly_faster_candidate():
    first = Attempt(index=1, code="a", result=verdict(2.0, 0.1))       # [1.8, 2.2]
    near_tie = Attempt(index=2, code="b", result=verdict(2.1, 0.1))    # [1.89, 2.31]: not clearly faster
    clearly = Attempt(index=3, code="c", result=verdict(3.0, 0.1))     # [2.7, 3.3]
    failed = Attempt(index=4, code="d", result=verdict(None, status="incorrect"))
    assert leader([first, near_tie]) is first
    assert leader([near_tie, first]) is first  # the order they were proposed, not the list's
    assert leader([first, near_tie, clearly, failed]) is clearly
    assert leader([failed]) is None


def _against(result: EvalResult, leader_attempt: Attempt, fresh: float | None) -> EvalResult:
    """`result` as a challenger's kept verdict, measured head to head with `leader_attempt`."""
    return head_to_head(result, result, HeadToHead(index=leader_attempt.index, code_hash=leader_attempt.code_hash,
                                                   speedup=fresh))


def test_a_challenger_must_clear_the_leader_s_fresh_reading_beside_it():
    """The leader read 2.0x when the machine was busy; beside the challenger, now quiet, it reads
    3.0x. The challenger's [2.7, 3.3] clears the old reading but not the fresh one: no new leader.
    Against a fresh reading below the old one, the old one still stands (the higher is the bar)."""
    first = Attempt(index=1, code="a", code_hash="ha", result=verdict(2.0, 0.1))
    drifted = Attempt(index=2, code="b", code_hash="hb", result=_against(verdict(3.0, 0.1), first, 3.0))
    assert leader([first, drifted]) is first
    clearly = Attempt(index=2, code="b", code_hash="hb", result=_against(verdict(3.0, 0.1), first, 2.1))
    assert leader([first, clearly]) is clearly
    # [1.93, 1.97] clears the leader's fresh 1.5x but not its own 2.0x
    busy_now = Attempt(index=2, code="b", code_hash="hb", result=_against(verdict(1.95, 0.01), first, 1.5))
    assert leader([first, busy_now]) is first
    # measured against another attempt than the leader (judged out of order): the leader's own reading decides
    other = Attempt(index=2, code="b", code_hash="hb",
                    result=_against(verdict(3.0, 0.1), Attempt(index=9, code="z", code_hash="hz"), 9.0))
    assert leader([first, other]) is other


def test_the_head_to_head_message_names_the_leader_s_fresh_reading():
    first = Attempt(index=1, code="a", code_hash="ha", result=verdict(2.0, 0.1))
    kept = _against(verdict(3.0, 0.1), first, 2.05)
    assert kept.timing.incumbent.index == 1 and kept.timing.incumbent.speedup == 2.05
    assert "the leader (attempt 1) read 2.050x between them" in kept.message
    assert "not correct" in _against(verdict(3.0, 0.1), first, None).message

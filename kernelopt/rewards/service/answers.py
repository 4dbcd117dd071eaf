"""The JSON a client gets back for its verdicts: an `EvalResult` with its reward, and the
OpenRLHF reply built from those. Every answer says how far its speedup can be trusted:
"speedup_interval" (the 95 % interval, or null) and "interval_too_wide" (the reward's
`max_interval` discounted or withheld it), next to the verdict's "flags"."""

from __future__ import annotations

import dataclasses
import json

from kernelopt.rewards.functions import Outcome, RewardFunction
from kernelopt.rewards.service.requests import EvalItem, Unscorable
from kernelopt.sandbox.results import EvalResult


def verdict_answer(item: EvalItem, result: EvalResult, compile_speedup: float | None = None) -> dict:
    """`compile_speedup`: torch.compile's cached speedup on this problem (the milestone reward's
    last step), written in the answer as "compile_speedup"."""
    # Through model_dump_json, so the answer is exactly what `kernelopt eval --json` prints
    # (infinities and NaNs as null, not as JSON that strict parsers refuse).
    answer = json.loads(result.model_dump_json())
    outcome = dataclasses.replace(Outcome.from_result(result), compile_speedup=compile_speedup)
    answer.update(reward=item.reward(outcome), reward_spec=item.reward.spec, compile_speedup=compile_speedup,
                  **_precision(item.reward, outcome))
    return answer


def format_error_answer(item: EvalItem, message: str) -> dict:
    """The answer for a completion with no program in it: every EvalResult field, so clients
    read it like any verdict."""
    answer = json.loads(EvalResult(status="incorrect", correct=False).model_dump_json())
    answer.update(status="format_error", message=message, problem_name=item.problem.name,
                  problem_hash=item.problem.content_hash,
                  reward=item.reward(Outcome.format_error()), reward_spec=item.reward.spec,
                  speedup_interval=None, interval_too_wide=False, compile_speedup=None)
    return answer


def unscorable_answer(item: EvalItem | Unscorable, reason: str) -> dict:
    """The answer for a sample that got no verdict (its response could not be told from its
    prompt, its problem is unknown, the queue was full, no verdict in time): the reward's
    failure value, status "unscorable", and why in "message"."""
    answer = json.loads(EvalResult(status="incorrect", correct=False).model_dump_json())
    problem = item.problem
    answer.update(status="unscorable", message=reason, problem_name=problem.name if problem else None,
                  problem_hash=problem.content_hash if problem else None,
                  reward=item.reward(Outcome("unscorable")), reward_spec=item.reward.spec,
                  speedup_interval=None, interval_too_wide=False, compile_speedup=None)
    return answer


def _precision(reward: RewardFunction, outcome: Outcome) -> dict:
    interval = outcome.interval() if outcome.correct else None
    return {"speedup_interval": list(interval) if interval else None, "interval_too_wide": reward.too_noisy(outcome)}


def openrlhf_answer(answers: list[dict], *, extra_logs: bool = True) -> dict:
    """What OpenRLHF reads: "rewards" (the advantage's reward), "scores" (0/1 correctness, for
    dynamic filtering) and "extra_logs" (one number per sample and key; left out when asked,
    for OpenRLHF 0.8's HTTP client, which concatenates them as tensors); plus, per sample, the
    status, the speedup's interval, the flags and the message of an unscorable sample."""
    correct = [1.0 if a["correct"] else 0.0 for a in answers]
    body: dict[str, object] = {"rewards": [a["reward"] for a in answers], "scores": correct,
            "statuses": [a["status"] for a in answers],
            "intervals": [a.get("speedup_interval") for a in answers],
            "flags": [list(a.get("flags") or ()) for a in answers],
            "messages": [a["message"] if a["status"] == "unscorable" else None for a in answers]}
    if extra_logs:
        body["extra_logs"] = {
            "kernelopt_correct": correct,
            "kernelopt_speedup": [a["speedup"] if a["speedup"] is not None else 0.0 for a in answers],
            "kernelopt_unscorable": [1.0 if a["status"] == "unscorable" else 0.0 for a in answers],
            "kernelopt_interval": [_half_width(a) for a in answers],
            "kernelopt_flagged": [1.0 if a.get("flags") else 0.0 for a in answers]}
    return body


def _half_width(answer: dict) -> float:
    """The interval's relative half-width, 0.0 when there is none (logs need a number)."""
    interval, speedup = answer.get("speedup_interval"), answer.get("speedup")
    return (interval[1] - speedup) / speedup if interval and speedup else 0.0

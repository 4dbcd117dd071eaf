"""The JSON a client gets back for its verdicts: an `EvalResult` with its reward, and the
OpenRLHF reply built from those."""

from __future__ import annotations

import json

from kernelopt.rewards.functions import Outcome
from kernelopt.rewards.service.requests import EvalItem
from kernelopt.sandbox.results import EvalResult


def verdict_answer(item: EvalItem, result: EvalResult) -> dict:
    # Through model_dump_json, so the answer is exactly what `kernelopt eval --json` prints
    # (infinities and NaNs as null, not as JSON that strict parsers refuse).
    answer = json.loads(result.model_dump_json())
    answer.update(reward=item.reward(Outcome.from_result(result)), reward_spec=item.reward.spec)
    return answer


def format_error_answer(item: EvalItem, message: str) -> dict:
    """The answer for a completion with no program in it: every EvalResult field, so clients
    read it like any verdict."""
    answer = json.loads(EvalResult(status="incorrect", correct=False).model_dump_json())
    answer.update(status="format_error", message=message, problem_name=item.problem.name,
                  problem_hash=item.problem.content_hash,
                  reward=item.reward(Outcome.format_error()), reward_spec=item.reward.spec)
    return answer


def openrlhf_answer(answers: list[dict]) -> dict:
    """What OpenRLHF reads: "rewards" (the advantage's reward), "scores" (0/1 correctness, for
    dynamic filtering) and "extra_logs" (numbers logged per sample); plus each verdict's status."""
    correct = [1.0 if a["correct"] else 0.0 for a in answers]
    return {"rewards": [a["reward"] for a in answers], "scores": correct,
            "extra_logs": {"kernelopt_correct": correct,
                           "kernelopt_speedup": [a["speedup"] if a["speedup"] is not None else 0.0 for a in answers]},
            "statuses": [a["status"] for a in answers]}

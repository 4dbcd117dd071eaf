"""Training data from scored attempts: the export formats, one pure function each, and writers.

Input is a list of *attempt records*, plain dicts, one per LLM answer that became a candidate or
a format error. The agent reads them from its run store (kernelopt/agent/records.py); anything
else that can produce these keys can use the formats too:

    run_id, candidate_id     the candidate's identity (ids are unique within a run)
    parent_id                the candidate it refines (same run), None for a first attempt
    problem_id               a stable string: "{level}/{problem id}" when known, else the name
    problem_name, level, problem_set, problem_hash, reference_source
    model, strategy, strategy_data
    prompt                   the chat messages sent: [{"role", "content"}, ...]
    response, reasoning      the answer's text and its reasoning section (or None)
    code                     the program extracted from the answer, None for a format error
    format_error             why no program could be extracted, else None
    verdict                  the referee's EvalResult as a dict; None when not judged

`scored_rows` turns records into the `jsonl` rows (status, reward, turn, ...); every other
format is derived from those rows (`verl` also needs the reference source), so one reward
computation serves them all. Rewards come from `kernelopt.rewards.functions`, applied per
*prompt group* (the answers to one identical list of messages) with `RewardFunction.group`:
that is what `cuda_l1` normalizes over, and the same as one at a time for the other rewards.
A candidate that was never judged (its run stopped first) has status "not_evaluated" and no
reward; it appears in `jsonl` only. docs/export.md gives every format's schema.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernelopt.rewards.functions import Outcome, RewardFunction, discounted_returns, make_reward, max_reward_returns

NOT_EVALUATED = "not_evaluated"
DATA_SOURCE = "kernelopt"
ABILITY = "cuda_kernel"


class ExportError(ValueError):
    """Export settings or output that cannot be used; the message says what to do."""


@dataclass(frozen=True)
class ExportSettings:
    reward: RewardFunction
    gamma: float = 1.0


# jsonl: one row per candidate ----------------------------------------------------------------

def scored_rows(records: list[dict], reward: RewardFunction) -> list[dict]:
    """One row per record, in record order: the verdict flattened, its reward, turn and parent."""
    rows = [_row(record) for record in records]
    turns = _turns(records)
    for row in rows:
        row["turn"] = turns[(row["run_id"], row["candidate_id"])]
    for group in _prompt_groups([r for r in rows if r["status"] != NOT_EVALUATED]):
        for row, value in zip(group, reward.group([_outcome(r) for r in group])):
            row["reward"] = value
    for row in rows:
        row["reward_spec"] = reward.spec
    return rows


def _row(record: dict) -> dict:
    verdict = record.get("verdict") or {}
    if record.get("code") is None:
        status = "format_error"
    else:
        status = verdict.get("status", NOT_EVALUATED)
    message = record.get("format_error") if status == "format_error" else verdict.get("message")
    return {
        "run_id": record["run_id"],
        "candidate_id": record["candidate_id"],
        "parent": record.get("parent_id"),
        "turn": None,
        "problem_id": record["problem_id"],
        "problem_name": record.get("problem_name"),
        "level": record.get("level"),
        "problem_set": record.get("problem_set"),
        "problem_hash": record.get("problem_hash"),
        "model": record.get("model"),
        "strategy": record.get("strategy"),
        "prompt": record["prompt"],
        "response": record["response"],
        "reasoning": record.get("reasoning"),
        "code": record.get("code"),
        "status": status,
        "correct": status == "correct",
        "speedup": verdict.get("speedup"),
        "reward": None,
        "reward_spec": None,
        "reference_ms": verdict.get("reference_ms"),
        "candidate_ms": verdict.get("candidate_ms"),
        "speedup_precision": (verdict.get("timing") or {}).get("speedup_precision"),
        "optimization_kinds": list(verdict.get("optimization_kinds") or []),
        "flags": list(verdict.get("flags") or []),
        "shapes": verdict.get("shapes"),
        "passes": verdict.get("passes"),
        "message": message,
        "strategy_data": record.get("strategy_data") or {},
    }


def _outcome(row: dict) -> Outcome:
    if row["status"] == "format_error":
        return Outcome.format_error()
    return Outcome.from_result(row)


def _turns(records: list[dict]) -> dict[tuple, int]:
    """0 for a first attempt, one more per refinement step along the parent chain. A parent that
    is not among the records counts as a first attempt."""
    parents = {(r["run_id"], r["candidate_id"]): r.get("parent_id") for r in records}
    turns: dict[tuple, int] = {}
    for key in parents:
        path, node = [], key
        while node not in turns:   # walk up to a node whose turn is known, or to the root
            path.append(node)
            parent = (node[0], parents[node]) if parents[node] is not None else None
            if parent is None or parent not in parents or parent in path:
                break
            node = parent
        if not path:
            continue
        last = path[-1]
        start = 0 if parents[last] is None else turns.get((last[0], parents[last]), 0) + 1
        for offset, member in enumerate(reversed(path)):
            turns[member] = start + offset
    return turns


def _prompt_key(messages: list[dict]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def _prompt_groups(rows: list[dict]) -> list[list[dict]]:
    """Rows answering the identical list of messages, across runs, in row order."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(_prompt_key(row["prompt"]), []).append(row)
    return list(groups.values())


def _judged(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["reward"] is not None]


def _ref(row: dict) -> dict:
    """Where a row came from, for the metadata of derived formats."""
    return {"run_id": row["run_id"], "candidate_id": row["candidate_id"], "turn": row["turn"],
            "status": row["status"], "speedup": row["speedup"], "reward": row["reward"]}


# sft: correct improvements as conversations --------------------------------------------------

def sft_rows(rows: list[dict]) -> list[dict]:
    """Correct candidates faster than what they were asked to improve: the parent's speedup when
    the parent was correct, else the reference's (speedup > 1). Identical (prompt, response)
    pairs are written once."""
    by_id = {(r["run_id"], r["candidate_id"]): r for r in rows}
    seen: set[tuple[str, str]] = set()
    out = []
    for row in rows:
        if not row["correct"] or row["speedup"] is None:
            continue
        parent = by_id.get((row["run_id"], row["parent"])) if row["parent"] is not None else None
        baseline = parent["speedup"] if parent is not None and parent["correct"] else 1.0
        key = (_prompt_key(row["prompt"]), row["response"])
        if row["speedup"] <= baseline or key in seen:
            continue
        seen.add(key)
        out.append({
            "messages": [*row["prompt"], {"role": "assistant", "content": row["response"]}],
            "problem_id": row["problem_id"], "model": row["model"], "baseline_speedup": baseline,
            "parent": row["parent"], **_ref(row), "reward_spec": row["reward_spec"],
            "optimization_kinds": row["optimization_kinds"], "flags": row["flags"],
        })
    return out


# preference: best answer vs each worse answer to the same prompt ------------------------------

def preference_rows(rows: list[dict]) -> list[dict]:
    """For every prompt with answers of different reward: the best answer (the earliest among
    equals) paired with each strictly worse answer; a rejected text already paired is skipped."""
    out = []
    for group in _prompt_groups(_judged(rows)):
        ranked = sorted(group, key=lambda r: -r["reward"])   # stable: earlier first among equals
        best = ranked[0]
        used = {best["response"]}
        for worse in ranked[1:]:
            if worse["reward"] >= best["reward"] or worse["response"] in used:
                continue
            used.add(worse["response"])
            out.append({
                "prompt": best["prompt"],
                "chosen": [{"role": "assistant", "content": best["response"]}],
                "rejected": [{"role": "assistant", "content": worse["response"]}],
                "chosen_reward": best["reward"], "rejected_reward": worse["reward"],
                "problem_id": best["problem_id"], "reward_spec": best["reward_spec"],
                "chosen_meta": _ref(best), "rejected_meta": _ref(worse),
            })
    return out


# trajectory: root-to-leaf chains with per-turn rewards and returns ----------------------------

def trajectory_rows(rows: list[dict], gamma: float) -> list[dict]:
    """One row per chain from a first attempt to a leaf along parent links (judged candidates
    only; a chain starts at the first ancestor that is among them)."""
    judged = _judged(rows)
    by_id = {(r["run_id"], r["candidate_id"]): r for r in judged}
    has_child = {(r["run_id"], r["parent"]) for r in judged if r["parent"] is not None}
    out: list[dict] = []
    for leaf in judged:
        if (leaf["run_id"], leaf["candidate_id"]) in has_child:
            continue
        chain: list[dict] = []
        node: dict | None = leaf
        while node is not None:
            chain.append(node)
            node = by_id.get((node["run_id"], node["parent"])) if node["parent"] is not None else None
        chain.reverse()
        rewards = [r["reward"] for r in chain]
        out.append({
            "run_id": leaf["run_id"], "problem_id": leaf["problem_id"], "model": leaf["model"],
            "candidate_ids": [r["candidate_id"] for r in chain],
            "turns": [{"turn": r["turn"], "candidate_id": r["candidate_id"], "prompt": r["prompt"],
                       "response": r["response"], "status": r["status"], "speedup": r["speedup"],
                       "reward": r["reward"]} for r in chain],
            "rewards": rewards,
            "returns": discounted_returns(rewards, gamma),
            "max_returns": max_reward_returns(rewards, gamma),
            "gamma": gamma, "reward_spec": leaf["reward_spec"],
            "best_reward": max(rewards), "final_status": leaf["status"],
        })
    return out


# agentic: tool-calling conversations with per-turn rewards -------------------------------------

def agentic_rows(records: list[dict], reward: RewardFunction, gamma: float) -> list[dict]:
    """One row per tool-calling conversation (records carrying `conversation`): its messages and
    tools in the OpenAI format, the reward of each assistant turn (the best reward among the
    candidates its tool calls judged; 0 for a turn that judged none), their returns, and the
    final reward (the submitted candidate's; 0 when nothing was submitted)."""
    rows = scored_rows(records, reward)
    groups: dict[tuple, list[tuple[dict, dict]]] = {}
    for record, row in zip(records, rows):
        if record.get("conversation") is not None:
            key = (row["run_id"], row["strategy_data"].get("conversation"))
            groups.setdefault(key, []).append((record, row))
    out = []
    for (run_id, number), members in groups.items():
        chat = members[0][0]["conversation"]
        turns = sum(1 for m in chat["messages"] if m.get("role") == "assistant")
        turn_rewards = [0.0] * turns
        for _, row in members:
            turn = row["strategy_data"].get("turn")
            if row["reward"] is not None and isinstance(turn, int) and 0 <= turn < turns:
                turn_rewards[turn] = max(turn_rewards[turn], row["reward"])
        submitted = [row for _, row in members if row["strategy_data"].get("tool") == "submit"]
        final = submitted[-1] if submitted else None
        judged = [row for _, row in members if row["reward"] is not None]
        first = members[0][1]
        out.append({
            "run_id": run_id, "conversation": number, "problem_id": first["problem_id"],
            "problem_name": first["problem_name"], "model": first["model"], "strategy": first["strategy"],
            "messages": chat["messages"], "tools": chat["tools"],
            "candidate_ids": [row["candidate_id"] for _, row in members],
            "turn_rewards": turn_rewards,
            "returns": discounted_returns(turn_rewards, gamma),
            "max_returns": max_reward_returns(turn_rewards, gamma),
            "final_reward": (final["reward"] or 0.0) if final is not None else 0.0,
            "final_status": final["status"] if final is not None else "not_submitted",
            "submitted_candidate": final["candidate_id"] if final is not None else None,
            "best_reward": max((row["reward"] for row in judged), default=0.0),
            "gamma": gamma, "reward_spec": reward.spec,
        })
    return out


# verl: one RL prompt per distinct first-turn prompt ------------------------------------------

def verl_rows(records: list[dict]) -> list[dict]:
    """verl's RL dataset rows: verl samples its own responses, so only the prompts matter; one
    row per distinct first-attempt prompt of each problem. `ground_truth` is the reference
    source, which is all the reward service needs to judge an answer."""
    out: list[dict] = []
    seen: set[tuple] = set()
    for record in records:
        if record.get("parent_id") is not None:
            continue
        key = (record.get("problem_hash"), _prompt_key(record["prompt"]))
        if key in seen:
            continue
        seen.add(key)
        out.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": m["role"], "content": m["content"]} for m in record["prompt"]],
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": record["reference_source"]},
            "extra_info": {"index": len(out), "split": "train", "problem_id": record["problem_id"],
                           "problem_name": record.get("problem_name"), "level": record.get("level"),
                           "problem_set": record.get("problem_set"),
                           "problem_hash": record.get("problem_hash"), "run_id": record["run_id"]},
        })
    return out


def verl_schema():
    """The parquet schema of verl rows (nested types spelled out so that empty or all-null
    columns keep their types)."""
    pa = _pyarrow()
    return pa.schema([
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", pa.struct([("index", pa.int64()), ("split", pa.string()), ("problem_id", pa.string()),
                                  ("problem_name", pa.string()), ("level", pa.int64()),
                                  ("problem_set", pa.string()), ("problem_hash", pa.string()),
                                  ("run_id", pa.string())])),
    ])


# writers and the registry --------------------------------------------------------------------

def write_jsonl(rows: list[dict], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_parquet(rows: list[dict], path: Path) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows, schema=verl_schema()), str(path))


def _pyarrow():
    try:
        import pyarrow
    except ImportError:
        raise ExportError("the verl format writes parquet, which needs pyarrow: "
                          "pip install 'kernelopt[hf]'") from None
    return pyarrow


@dataclass(frozen=True)
class ExportFormat:
    name: str
    description: str
    build: Callable[[list[dict], ExportSettings], list[dict]]
    write: Callable[[list[dict], Path], None]
    needs: Callable[[], object] | None = None   # checks an optional dependency before any work


FORMATS: dict[str, ExportFormat] = {f.name: f for f in (
    ExportFormat("jsonl", "one row per candidate: prompt, response, code, verdict, reward, turn, parent",
                 lambda records, s: scored_rows(records, s.reward), write_jsonl),
    ExportFormat("sft", "correct improvements as chat conversations ({\"messages\": [...]})",
                 lambda records, s: sft_rows(scored_rows(records, s.reward)), write_jsonl),
    ExportFormat("preference", "chosen/rejected answer pairs for one prompt (best vs each worse)",
                 lambda records, s: preference_rows(scored_rows(records, s.reward)), write_jsonl),
    ExportFormat("trajectory", "root-to-leaf refinement chains with per-turn rewards and returns",
                 lambda records, s: trajectory_rows(scored_rows(records, s.reward), s.gamma), write_jsonl),
    ExportFormat("verl", "verl RL dataset parquet: one row per distinct first-turn prompt",
                 lambda records, s: verl_rows(records), write_parquet, needs=_pyarrow),
    ExportFormat("agentic", "tool-calling conversations (--strategy agent) as OpenAI messages with "
                 "per-turn and final rewards", lambda records, s: agentic_rows(records, s.reward, s.gamma),
                 write_jsonl),
)}


def format_names() -> list[str]:
    return list(FORMATS)


def get_format(name: str) -> ExportFormat:
    """The format called `name`, once its optional dependency is known to be installed."""
    if name not in FORMATS:
        raise ExportError(f"unknown export format {name!r}: choose one of {', '.join(FORMATS)}")
    chosen = FORMATS[name]
    if chosen.needs:
        chosen.needs()
    return chosen


def check_gamma(gamma: float) -> float:
    if not (isinstance(gamma, (int, float)) and math.isfinite(gamma) and 0.0 <= gamma <= 1.0):
        raise ExportError(f"gamma must be a number from 0 to 1, not {gamma!r}")
    return float(gamma)


def export_records(records: list[dict], format_name: str, out: str | Path, reward: str = "speedup",
                   gamma: float = 1.0) -> int:
    """Builds one format from the records and writes it to `out`; returns the rows written.
    Raises RewardError for a bad reward spec, ExportError for anything else unusable."""
    fmt = get_format(format_name)
    settings = ExportSettings(make_reward(reward), check_gamma(gamma))
    rows = fmt.build(records, settings)
    path = Path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fmt.write(rows, path)
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc}") from exc
    return len(rows)

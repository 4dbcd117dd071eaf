"""Attempt records from the run store, for the export formats of kernelopt/rewards/export.py.

It reads the store's tables (runs, candidates, LLM calls, evaluations), so it lives beside the
store; the formats take these plain records and know nothing of the store, so the rewards
package does not depend on the agent.

One record per candidate (an LLM answer with a program or a format error): the candidate row
joined with its LLM call (the request's messages and the answer's text) and, by the run and the
code hash, with its evaluation (the whole stored `EvalResult`). LLM calls without a candidate
(failed calls, critiques) are not attempts and are left out. A candidate judged by a tool call of
a `--strategy agent` conversation also carries `conversation`: that conversation's messages and
tools (the `agentic` export format).

A problem's `problem_id` is the stable string "{level}/{id}" when both are known: from the run's
`bench` settings (runs started by `kernelopt bench` or `generate`), else from a KernelBench-style
path of the problem file (".../level1/19_ReLU.py" -> "1/19"); otherwise it is the problem's name.
Ids from different problem sets can collide ("1/4" of two sets), so each record also carries
`problem_set` (when known) and `problem_hash`, the SHA-256 of the reference source.
"""

from __future__ import annotations

import json

from kernelopt.agent.store import RunStore
from kernelopt.kernelbench import ProblemError, problem_from_source


def load_records(store: RunStore, run_ids: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """(the runs, their attempt records): the given runs in the order given (StoreError for an
    unknown one), or every run of the store, oldest first."""
    runs = [store.run(run_id) for run_id in dict.fromkeys(run_ids)] if run_ids else store.runs()
    records = []
    for run in runs:
        problem = problem_info(run)
        chats = conversations(store, run["id"])
        for candidate in store.candidates_with_calls(run["id"]):
            record = attempt_record(run, problem, candidate)
            number = record["strategy_data"].get("conversation")
            if number in chats and "tool_call_id" in record["strategy_data"]:
                record["conversation"] = chats[number]
            records.append(record)
    return runs, records


def conversations(store: RunStore, run_id: str) -> dict[int, dict]:
    """The tool-calling conversations of a run (`--strategy agent`), by number: the messages
    (OpenAI format: the last reply that called tools, with everything before it, its tool calls
    and their results) and the `tools` offered. A conversation's text-only last reply, if any, is
    not among the messages; MCP runs (no LLM calls) have none."""
    tool_calls = [t for t in store.tool_calls(run_id) if t["llm_call_id"] is not None]
    if not tool_calls:
        return {}
    calls = {c["id"]: c for c in store.calls(run_id)}
    last: dict[int, int] = {}
    for t in tool_calls:
        last[t["conversation"]] = max(last.get(t["conversation"], 0), t["llm_call_id"])
    chats = {}
    for number, call_id in last.items():
        call = calls[call_id]
        request = json.loads(call["request"])
        response = json.loads(call["response"]) if call["response"] else {}
        message = ((response.get("choices") or [{}])[0] or {}).get("message") or {}
        requested = [{"id": c["id"], "type": "function", "function": c["function"]}
                     for c in message.get("tool_calls") or []]
        reply = {"role": "assistant", "content": message.get("content"), "tool_calls": requested}
        asked = {c["id"] for c in requested}
        results = [{"role": "tool", "tool_call_id": t["call_id"], "content": t["result"]}
                   for t in tool_calls if t["llm_call_id"] == call_id and t["call_id"] in asked]
        chats[number] = {"messages": request.get("messages", []) + [reply] + results,
                         "tools": request.get("tools") or []}
    return chats


def problem_info(run: dict) -> dict:
    """The problem's identity for export: id string, name, level, set and hash."""
    bench = run["config"].get("bench") or {}
    level, number = bench.get("level"), bench.get("problem_id")
    if level is None or number is None:
        level, number = _from_path(run)
    name = run["problem_name"]
    return {
        "problem_id": f"{level}/{number}" if level is not None and number is not None else name,
        "problem_name": name,
        "level": level,
        "problem_set": bench.get("set"),
        "problem_hash": run["problem_hash"],
        "reference_source": run["problem_source"],
    }


def _from_path(run: dict) -> tuple[int | None, int | None]:
    try:
        problem = problem_from_source(run["problem_source"], path=run["problem_path"] or "<memory>")
    except ProblemError:   # the stored source was valid when the run started; be safe anyway
        return None, None
    return problem.level, problem.problem_id


def attempt_record(run: dict, problem: dict, candidate: dict) -> dict:
    request = json.loads(candidate["request"]) if candidate["request"] else {}
    return {
        "run_id": run["id"],
        "candidate_id": candidate["id"],
        "parent_id": candidate["parent_id"],
        **problem,
        "model": request.get("model") or run["model"],
        "strategy": run["strategy"],
        "strategy_data": candidate["strategy_data"],
        "prompt": request.get("messages") or [],
        "response": candidate["content"] or "",
        "reasoning": candidate["reasoning"],
        "code": candidate["code"],
        "format_error": candidate["format_error"],
        "verdict": json.loads(candidate["result"]) if candidate["result"] else None,
    }

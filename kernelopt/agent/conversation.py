"""`--strategy agent`'s attempt: one tool-calling conversation through the OpenAI tools
(function-calling) API, the referee behind its tools (tools.py).

Each reply of the model is one LLM call of the run (the budget's call limit; its tokens and
cost), made through the attempt pipeline, so it is stored, cached and replayed like every other
call. Each tool call the reply makes is answered (evaluate, profile and submit judge a candidate:
one evaluation each; reference and best are free) and recorded in the store's `tool_calls`;
the answers go back as `tool` messages and the conversation goes on until the model submits,
answers without a tool call, runs out of `turns`, or the budget ends it. A reply of plain text
that holds a program counts as its submission; one without a program is asked to use the tools.

Resuming: the requests are a function of the earlier replies and the tool results, and both come
back from the store (finished calls by request hash, candidates by tool call id, verdicts by code
hash), so a replayed conversation sends the same requests and redoes no finished work.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from typing import TYPE_CHECKING

from kernelopt.agent.llm import LLMCallError, LLMConfigError
from kernelopt.agent.tools import ToolOutcome, Toolbox, openai_tools, tool_error
from kernelopt.kernelbench.completion import FormatError, extract_code

if TYPE_CHECKING:
    from kernelopt.agent.attempt import Attempt, AttemptPipeline
    from kernelopt.agent.store import LLMCallRecord

NUDGE = ("Use the tools: evaluate(code) to judge a program, submit(code) to hand in your final "
         "one. Pass the whole program as the `code` argument.")
OTHER_STRATEGIES = "refine, best-of-n, tree, evolve or samples"


def tools_refused(exc: LLMConfigError) -> LLMConfigError:
    return LLMConfigError(
        f"{exc}. --strategy agent needs a model and server with tool (function) calling (the "
        "OpenAI `tools` parameter; vLLM needs --enable-auto-tool-choice and --tool-call-parser); "
        f"with this endpoint, use another --strategy: {OTHER_STRATEGIES}")


def start_conversation(pipeline: AttemptPipeline, messages: list[dict], turns: int) -> Future | None:
    """The pipeline's next conversation, started beside the run's other work (numbered in the
    order started, so a replay numbers them alike); None when the budget is spent."""
    if pipeline.stop_reason():
        return None
    number = pipeline.conversations
    pipeline.conversations += 1
    return pipeline.run_task(lambda: run_conversation(pipeline, list(messages), number, turns))


def assistant_message(record: LLMCallRecord) -> dict:
    """The reply as it goes back into the conversation (OpenAI messages format)."""
    choices = (record.response or {}).get("choices") or [{}]
    raw = (choices[0] or {}).get("message") or {}
    message: dict = {"role": "assistant", "content": record.content or None}
    calls = []
    for index, call in enumerate(raw.get("tool_calls") or []):
        function = (call or {}).get("function") or {}
        calls.append({"id": call.get("id") or f"call_{index}", "type": "function",
                      "function": {"name": str(function.get("name") or ""),
                                   "arguments": function.get("arguments") or ""}})
    if calls:
        message["tool_calls"] = calls
    return message


def run_conversation(pipeline: AttemptPipeline, messages: list[dict], number: int,
                     turns: int) -> Attempt | None:
    """The conversation; returns the submitted candidate (else the last one judged, or None)."""
    toolbox, tools = Toolbox(pipeline), openai_tools()
    last: Attempt | None = None
    for turn in range(turns):
        if not pipeline.budget.reserve_call():
            break
        try:
            record = pipeline.chat({**pipeline.settings.request(messages), "tools": tools}, "agent")
        except LLMConfigError as exc:
            pipeline.fail(tools_refused(exc) if "refused the request" in str(exc) else exc)
            break
        except LLMCallError:
            break   # this conversation is over; the next one starts afresh
        message = assistant_message(record)
        messages.append(message)
        calls = message.get("tool_calls")
        if not calls:
            if not _holds_program(record.content, pipeline.prompts.backend):
                messages.append({"role": "user", "content": NUDGE})
                continue
            outcome = _answer(pipeline, toolbox, record, number, turn, f"text_{turn}", "submit",
                              {"code": record.content}, last)
            return outcome.attempt or last
        ended = None
        for call in calls:
            function = call["function"]
            if ended is not None:
                outcome = tool_error(f"not run: {ended}")
                _record(pipeline, record, number, turn, call["id"], function["name"],
                        function["arguments"], outcome)
            else:
                outcome = _answer(pipeline, toolbox, record, number, turn, call["id"],
                                  function["name"], function["arguments"], last)
            last = outcome.attempt or last
            if outcome.ends and ended is None:
                ended = ("the attempt was submitted" if function["name"] == "submit"
                         else pipeline.stop_reason() or "the budget is spent")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": outcome.text})
        if ended is not None:
            break
    return last


def _holds_program(text: str | None, backend: str) -> bool:
    try:
        extract_code(text or "", backend)
        return True
    except FormatError:
        return False


def _answer(pipeline: AttemptPipeline, toolbox: Toolbox, record: LLMCallRecord, number: int,
            turn: int, call_id: str, name: str, arguments, last: Attempt | None) -> ToolOutcome:
    data = {"conversation": number, "turn": turn, "tool_call_id": call_id}
    outcome = toolbox.call(name, arguments, data=data, call_id=record.id, parent=last)
    left = _budget_left(pipeline)
    if left:
        outcome.text += f"\n({left})"
    _record(pipeline, record, number, turn, call_id, name, arguments, outcome)
    return outcome


def _record(pipeline: AttemptPipeline, record: LLMCallRecord, number: int, turn: int,
            call_id: str, name: str, arguments, outcome: ToolOutcome) -> None:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    candidate = outcome.attempt.candidate_id if outcome.attempt is not None else None
    pipeline.store.add_tool_call(pipeline.run_id, record.id, number, turn, call_id, name, text,
                                 outcome.text, outcome.is_error, candidate)


def _budget_left(pipeline: AttemptPipeline) -> str:
    budget, limits = pipeline.budget, pipeline.budget.limits
    parts = []
    if limits.llm_calls is not None:
        parts.append(f"{max(0, limits.llm_calls - budget.calls)} replies")
    if limits.evaluations is not None:
        parts.append(f"{max(0, limits.evaluations - budget.evaluations)} evaluations")
    return "budget left: " + ", ".join(parts) if parts else ""

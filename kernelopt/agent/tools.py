"""The referee as tools: what `--strategy agent` offers the model and `kernelopt mcp` offers any
MCP client. One job: a tool's name and JSON arguments in, the text answered out, judged by the
run's attempt pipeline (the real referee, the store, the budget).

- evaluate(code): the verdict with its feedback, as the refine prompt shows it (one evaluation).
- profile(code): the same verdict and, for a correct candidate, where the time goes (one
  evaluation; the same code judged before costs nothing more).
- reference(): the problem (the reference program) and the hardware facts (free).
- best(): the best correct candidate so far, its code and verdict (free).
- submit(code): judged like evaluate, and ends the attempt's conversation (one evaluation).

Every code tool is an evaluation the budget must allow; identical code is judged once per run. A
bad call (unknown tool, arguments that are not a JSON object, a missing `code`, a program without
ModelNew, a spent budget) is answered as a tool error, never raised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernelopt.kernelbench.completion import FormatError, extract_code

if TYPE_CHECKING:
    from kernelopt.agent.attempt import Attempt, AttemptPipeline

_CODE = {"type": "object", "additionalProperties": False, "required": ["code"],
         "properties": {"code": {"type": "string", "description":
                                 "the whole Python program defining class ModelNew"}}}
_NOTHING = {"type": "object", "additionalProperties": False, "properties": {}}

# name -> (description, JSON schema of the arguments)
TOOLS: dict[str, tuple[str, dict]] = {
    "evaluate": ("Judge a candidate program with the referee (correctness trials, then timing "
                 "against the reference): returns the verdict, speedup and error feedback. "
                 "Costs one evaluation of the budget; identical code is judged once.", _CODE),
    "profile": ("Judge a candidate like evaluate and, when it is correct, show where its time "
                "goes (the profile table and roofline). Costs one evaluation.", _CODE),
    "reference": ("The problem: the reference program to beat and the facts of the hardware "
                  "the candidates are timed on. Free.", _NOTHING),
    "best": ("The best correct candidate so far (its code and verdict), or that there is none "
             "yet. Free.", _NOTHING),
    "submit": ("Submit the final program: it is judged like evaluate and the attempt ends. "
               "Costs one evaluation.", _CODE),
}
CODE_TOOLS = ("evaluate", "profile", "submit")


def openai_tools() -> list[dict]:
    """The tools in the OpenAI Chat Completions `tools` format."""
    return [{"type": "function", "function": {"name": name, "description": description,
                                              "parameters": schema}}
            for name, (description, schema) in TOOLS.items()]


@dataclass
class ToolOutcome:
    text: str
    is_error: bool = False
    attempt: Attempt | None = None
    ends: bool = False           # submit: the conversation is over


def tool_error(message: str) -> ToolOutcome:
    return ToolOutcome(f"error: {message}", is_error=True)


def parse_arguments(raw: str | dict | None) -> dict:
    """A tool call's arguments as a dict; ValueError with the reason when they are not one."""
    if isinstance(raw, dict):
        return raw
    if raw is None or not str(raw).strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object such as {\"code\": \"...\"}")
    return value


class Toolbox:
    """The tools over one run's attempt pipeline. `data`: the strategy data stored with each
    candidate a tool judges (conversation, turn, tool_call_id)."""

    def __init__(self, pipeline: AttemptPipeline):
        self.pipeline = pipeline

    def call(self, name: str, raw_arguments: str | dict | None, *, data: dict | None = None,
             call_id: int | None = None, parent: Attempt | None = None) -> ToolOutcome:
        if name not in TOOLS:
            return tool_error(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
        try:
            arguments = parse_arguments(raw_arguments)
        except ValueError as exc:
            return tool_error(f"{name}: {exc}")
        if name == "reference":
            return ToolOutcome(self.reference())
        if name == "best":
            return ToolOutcome(self.best())
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return tool_error(f"{name} needs {{\"code\": \"<the whole program>\"}}")
        return self.judge(name, code, data or {}, call_id, parent)

    def reference(self) -> str:
        prompts = self.pipeline.prompts
        facts = "\n".join(f"- {fact}" for fact in prompts.hardware)
        return (f"problem: {prompts.problem_name}\nbackend: {prompts.backend}\n"
                f"device: {prompts.device_desc}\n" + (f"hardware facts:\n{facts}\n" if facts else "")
                + f"reference program:\n```python\n{prompts.reference_source.strip()}\n```")

    def best(self) -> str:
        best = self.pipeline.best()
        if best is None or best.code is None:  # (a correct attempt always has its code)
            return "no correct candidate yet"
        return (f"candidate {best.index}: {best.headline}\n```python\n{best.code.strip()}\n```\n"
                f"{best.feedback}")

    def judge(self, name: str, code: str, data: dict, call_id: int | None,
              parent: Attempt | None = None) -> ToolOutcome:
        try:
            program = extract_code(code, self.pipeline.prompts.backend).code
        except FormatError as exc:
            return ToolOutcome(f"error: {exc}", is_error=True, ends=name == "submit")
        future = self.pipeline.judge_code(program, parent=parent, data={**data, "tool": name},
                                          call_id=call_id)
        if future is None:
            reason = self.pipeline.stop_reason() or "the budget allows no more evaluations"
            return ToolOutcome(f"error: not judged: {reason}", is_error=True, ends=True)
        attempt = future.result()
        text = f"candidate {attempt.index}: {attempt.headline}\n{attempt.feedback}"
        if name == "profile":
            profile = attempt.view()["profile"]
            why = ("only a correct candidate is profiled" if self.pipeline.eval_options.profile
                   else "profiling is off for this run (--no-profile)")
            text += "\nprofile:\n" + (profile or f"none ({why})")
        if name == "submit":
            text += "\nsubmitted: this attempt is over"
        return ToolOutcome(text, attempt=attempt, ends=name == "submit")

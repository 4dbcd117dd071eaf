"""The referee's answer (the reward service's JSON, docs/serve.md) as the text a policy reads on
its next turn: the verdict, why it failed (the message, the compiler's error lines), and for a
correct candidate its speedup with the interval. Built from a short list of fields only: never
the trials' data, the candidate's output, the logs, nor any line that looks like dumped tensor
values, so no output of the reference (its inputs come from the referee's secret seeds) reaches
the policy through a message.
"""

from __future__ import annotations

import re

MESSAGE_CHARS = 600   # a longer message is cut
LOG_LINES = 20        # compiler error lines shown at most
# A line that dumps values: a tensor/array repr, or a run of eight or more numbers.
_DUMP = re.compile(r"\b(tensor|array|ndarray)\(|(?:[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?[,\s]+){8,}", re.IGNORECASE)
_LOG_ERROR = re.compile(r"error|undefined reference|not declared", re.IGNORECASE)

ASK_AGAIN = ("Reply with the complete program (the imports, the kernel and class ModelNew) in one "
             "```python block.")
ASK_FASTER = "It is correct. Make it faster: reply with the complete improved program in one ```python block."
ASK_FIX = "Fix it: reply with the complete corrected program in one ```python block."


def verdict_text(answer: dict) -> str:
    """What the referee said about one answer, as lines of text."""
    status = answer.get("status", "unscorable")
    lines = [f"verdict: {status}"]
    message = _clean(_shown_message(answer))
    if message and status != "correct":
        cut = len(message) > MESSAGE_CHARS
        lines.append(f"message: {message[:MESSAGE_CHARS]}" + (" ..." if cut else ""))
    if status == "compile_error":
        errors = [line.strip()[:300] for line in (answer.get("compile_log") or "").splitlines()
                  if _LOG_ERROR.search(line) and not _DUMP.search(line)]
        if errors:
            lines.append("compiler errors:")
            lines.extend(list(dict.fromkeys(errors))[:LOG_LINES])
    if status == "correct" and answer.get("speedup") is not None:
        lines.append(f"speedup: {answer['speedup']:.3f}x over the reference" + _interval(answer))
    if answer.get("flags"):
        lines.append("flags: " + ", ".join(map(str, answer["flags"])))
    return "\n".join(lines)


def _shown_message(answer: dict) -> str:
    """The answer's message, or for a problem with held-out input configurations the one a
    prompt may show (nothing of a held-out configuration: sandbox/shaped.py)."""
    if not any(shape.get("held_out") for shape in answer.get("shapes") or []):
        return answer.get("message") or ""
    from kernelopt.sandbox.results import EvalResult
    from kernelopt.sandbox.shaped import prompt_view

    return prompt_view(EvalResult.model_validate(answer)).message


def turn_feedback(answer: dict, *, last: bool) -> str:
    """The environment's reply to a turn: the verdict, then what to do next (nothing on the last turn)."""
    text = verdict_text(answer)
    if last:
        return text
    status = answer.get("status")
    ask = ASK_FASTER if status == "correct" else ASK_AGAIN if status in ("format_error", "unscorable") else ASK_FIX
    return f"{text}\n\n{ask}"


def _interval(answer: dict) -> str:
    interval = answer.get("speedup_interval")
    if not interval:
        return ""
    low, high = interval
    return f" (95% interval {low:.3f}x to {high:.3f}x: a smaller difference is noise)"


def _clean(text: str) -> str:
    """The message without lines that dump values."""
    return "\n".join(line for line in text.strip().splitlines() if not _DUMP.search(line)).strip()

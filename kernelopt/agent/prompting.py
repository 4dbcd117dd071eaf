"""Prompts: the Jinja2 templates in `kernelopt/prompts/` rendered into chat messages, and the
referee's feedback turned into text for them.

Templates use StrictUndefined, so a missing variable is an error here, never a silently empty
prompt. The backend (kernelbench/backends.py: cuda, cupy, triton, cpp) picks the system prompt's
rules (`_rules_<backend>.j2`), the first prompt's worked example (`_example_<backend>.j2`) and
the wording; a new backend is one registry entry and those two templates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from kernelopt.kernelbench.backends import BACKENDS as KERNEL_BACKENDS
from kernelopt.kernelbench.backends import default_backend
from kernelopt.sandbox.physics import sol_text
from kernelopt.sandbox.shaped import prompt_view

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "prompts"
BACKENDS = tuple(KERNEL_BACKENDS)

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                          trim_blocks=True, lstrip_blocks=True, autoescape=False)

LOG_LINES = 40          # compile log lines shown to the model
OUTPUT_CHARS = 1500     # candidate stdout/stderr tail shown
HISTORY_ERROR_CHARS = 600
MESSAGE_CHARS = 400     # a longer message (a whole build log) is cut; its error lines are kept

# Compiler diagnostics decide a build failure; compiler invocations (long lists of flags) never
# do, and they fill a message that embeds a build log.
_DIAGNOSTIC = re.compile(r":\d+(:\d+)?: (fatal )?error|undefined reference|error: ")
_ERROR_LINE = re.compile(r"error|exception|not declared", re.IGNORECASE)
_COMMAND = re.compile(r"(^|\[\d+/\d+\] )(\S*/)?(c\+\+|g\+\+|gcc|clang\+\+|nvcc|cicc|ptxas) |\s-isystem\s")


@dataclass
class PromptContext:
    """What every prompt of one run shares."""

    reference_source: str
    problem_name: str
    backend: str
    device_desc: str
    hardware: list[str] = field(default_factory=list)  # facts about the device (sandbox/hardware.py)
    training_pass: str = "forward"  # what the referee judges (kernelbench/training.py)

    def render(self, template: str, **values) -> str:
        return _env.get_template(template).render(
            reference_source=self.reference_source.strip(), problem_name=self.problem_name,
            backend=self.backend, kernel=KERNEL_BACKENDS[self.backend], device_desc=self.device_desc,
            hardware=self.hardware, training_pass=self.training_pass, **values).strip() + "\n"

    def messages(self, template: str, **values) -> list[dict]:
        return [{"role": "system", "content": self.render("system.j2")},
                {"role": "user", "content": self.render(template, **values)}]


def backend_for(device: str) -> str:
    """The backend `auto` stands for on the device."""
    return default_backend(device)


def feedback_text(result) -> str:
    """The referee's verdict as the model should read it: what failed and why, with numbers
    (nothing of a held-out input configuration: shaped.prompt_view)."""
    result = prompt_view(result)
    lines = [f"verdict: {result.status}"]
    message = without_commands(result.message)
    if message:
        cut = len(message) > MESSAGE_CHARS
        lines.append(f"message: {message[:MESSAGE_CHARS]}" + (" ..." if cut else ""))
    errors = [line for line in error_lines(result.message + "\n" + result.compile_log)
              if line not in message[:MESSAGE_CHARS]]
    if errors and result.status != "correct":
        lines.append("error lines:")
        lines.extend(errors)
    if result.status == "correct" and result.speedup is not None:
        precision = result.timing.speedup_precision if result.timing is not None else None
        noise = f" +-{precision:.0%} (95% interval: smaller differences are noise)" if precision is not None else ""
        lines.append(f"timing: reference {result.reference_ms:.4g} ms, candidate {result.candidate_ms:.4g} ms, "
                     f"speedup {result.speedup:.3f}x{noise}")
        if result.passes is not None:
            lines.append("passes: " + ", ".join(f"{name} {p.speedup:.3f}x" for name, p in (
                ("forward", result.passes.forward), ("backward", result.passes.backward),
                ("training step", result.passes.step)) if p is not None and p.speedup is not None))
        sol = sol_text(result.timing)
        if sol:
            lines.append(sol)
    failed = [t for t in result.trials if not t.passed]
    for trial in failed[:3]:
        stats = ", ".join(f"{name} {value:.3g}" for name, value in (
            ("max abs error", trial.max_abs_error), ("max rel error", trial.max_rel_error),
            ("relative L2 error", trial.rel_l2_error), ("mismatched fraction", trial.mismatch_fraction))
            if value is not None)
        lines.append(f"trial {trial.index}: {trial.message or 'mismatch'}" + (f" ({stats})" if stats else ""))
    lines.extend(f"configuration [{v.name}]: {v.status}" + (f", speedup {v.speedup:.3f}x" if v.speedup else "")
                 for v in result.shapes or [])
    if result.optimization_kinds:
        lines.append("optimization kind: " + ", ".join(result.optimization_kinds))
    if result.flags:
        lines.append("flags: " + ", ".join(result.flags))
    log = [line for line in result.compile_log.strip().splitlines() if not _COMMAND.search(line)]
    if log and result.status != "correct":
        lines.append(f"compile log (last {min(len(log), LOG_LINES)} lines):")
        lines.extend(log[-LOG_LINES:])
    output = result.candidate_output.strip()
    if output and result.status != "correct":
        lines.append("program output (tail):")
        lines.append(output[-OUTPUT_CHARS:])
    return "\n".join(lines)


def profile_text(result) -> str | None:
    """A correct candidate's profile (--profile) as the short table the prompts show, or None."""
    if result is None or not result.correct or result.profile is None:
        return None
    from kernelopt.sandbox.profiling import table

    return table(result.profile) or None


def format_error_feedback(message: str) -> str:
    return f"verdict: format_error\nmessage: {message}"


def without_commands(text: str) -> str:
    """The text with compiler invocations cut out (a line is cut where the command starts)."""
    kept = []
    for line in text.strip().splitlines():
        match = _COMMAND.search(line)
        line = line[:match.start()].rstrip() + " [command]" if match else line
        if line.strip() != "[command]":
            kept.append(line)
    return "\n".join(kept).strip()


def error_lines(text: str, limit: int = 5) -> list[str]:
    """The lines of a log that name an error: compiler diagnostics first, then exceptions."""
    diagnostics: list[str] = []
    others: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or _COMMAND.search(line) or line.startswith(("raise ", "File ")):
            continue
        if _DIAGNOSTIC.search(line):
            diagnostics.append(line[:300])
        elif _ERROR_LINE.search(line):
            others.append(line[:300])
    return list(dict.fromkeys(diagnostics + others))[:limit]


def short_error(message: str, log: str = "") -> str:
    """The decisive part of a failure, for the history list of later prompts: the message's
    first line and the error lines of the message and log."""
    cleaned = without_commands(message)
    head = cleaned.splitlines()[0][:200] if cleaned else ""
    errors = [line for line in error_lines(message + "\n" + log) if line not in head]
    text = " | ".join([part for part in [head, *errors[:3]] if part])
    return text[:HISTORY_ERROR_CHARS] + (" ..." if len(text) > HISTORY_ERROR_CHARS else "")

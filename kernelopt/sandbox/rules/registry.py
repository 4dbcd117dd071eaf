"""The rules' registry: what a verdict is, how a rule is registered, and how the session acts
on a rule's answer (`enforce`). The rules themselves live in the sibling modules, one per
kind of record they judge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kernelopt.sandbox.results import FLAGS

FLAGGED = "flagged"  # a verdict that flags the candidate and lets the evaluation go on


@dataclass(frozen=True)
class Verdict:
    """What a rule decided: a status (or FLAGGED), why, and the flags it sets."""

    rule: str
    status: str
    message: str
    flags: tuple[str, ...] = ()
    log: str = ""


class VerdictReached(Exception):
    """Ends an evaluation early with a rule's verdict (control flow, not an error)."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message)
        self.verdict = verdict
        self.status, self.message, self.flags, self.log = verdict.status, verdict.message, list(verdict.flags), \
            verdict.log


class ProblemCodeFailed(VerdictReached):
    """The problem's own code (its import or get_init_inputs) failed in the candidate's worker,
    before any candidate code ran. The reference's load decides whom to blame: when it fails
    too, the problem is broken (ProblemError); otherwise this is the candidate's verdict."""


@dataclass(frozen=True)
class Rule:
    name: str
    status: str  # what the verdict's status is; "rejected / flagged" where it depends
    flag: str | None
    family: str
    example: str | None  # a candidate path under tests/adversarial/ that triggers it
    check: Callable[..., Verdict | None]
    summary: str


RULES: dict[str, Rule] = {}

# Rules no candidate of tests/adversarial/ can reach deterministically, and why. Each is
# unit-tested on synthetic records (tests/test_rules.py).
NO_CORPUS_EXAMPLE: dict[str, str] = {
    "worker_protocol_error": "the worker reports a protocol error only when the host's frames are out of order; "
                             "a candidate cannot write to the command channel",
    "compile_error": "not a hack: tests/test_adversarial.py's malformed-candidate tests (templates) reach it",
    "problem_code_failed": "needs a problem whose own code fails only in the candidate's worker; "
                           "tests/test_batch.py covers the attribution",
    "build_timeout": "needs an extension build that outlasts the evaluation; tests/test_builds.py (slow)",
    "malformed_reply": "the worker, not the candidate, writes the reply frames",
    "invalid_call_reply": "the worker, not the candidate, writes the reply frames; tests/test_calls.py forges one",
    "missing_in_reply": "the worker, not the candidate, writes the reply frames",
    "unusable_outputs": "the worker describes outputs after checking each is a plain tensor (output_not_plain_tensor); "
                        "tests/test_calls.py names unmapped memory",
    "unoffered_build": "a build request is sent by the worker's own build hook, only when host builds are on",
    "outputs_written_after_the_window": "needs a GPU, and which of three verdicts a program left running past its "
                                        "answer gets depends on the device's timing "
                                        "(hacks/answer_before_the_device_finishes.py); tests/test_device_slots.py "
                                        "writes late into a slot the keeper samples",
    "guard_unknown_finding": "the guard names only known flags; a made-up flag would need the candidate to write "
                             "the report",
    "init_inputs_changed": "the init inputs are made in the candidate's worker before its module's code can "
                           "reach them; the corpus's attempts end in other rules first",
    "output_count": "defence in depth: the structure string already counts the tensors (output_structure)",
    "uncontained": "the machine's property, not the candidate's: tests/test_containment.py forces "
                   "KERNELOPT_CONTAINMENT=none and checks that the verdict is flagged",
    "host_memory_taken": "needs a machine whose available memory a candidate can exhaust; tests/test_host_memory.py "
                         "fakes the machine's available memory around real workers",
    "memory_limit": "the memory hogs end as memory_limit or as a worker death, by which the allocator hits first",
    "faster_than_physics": "the host's clocks time every call, so no candidate can make its measured time impossibly "
                           "small (hacks/timer_report_zero_time.py tries and gains nothing); tests/test_physics.py "
                           "lowers the ceiling ($KERNELOPT_CEILING_BANDWIDTH) and checks that the rule fires end to end",
}


def rule(name: str, *, status: str, flag: str | None = None, family: str,
         example: str | None = None) -> Callable[[Callable], Callable]:
    """Register a rule function under `name` (its docstring's first line is the table's summary)."""

    def register(check: Callable) -> Callable:
        summary = (check.__doc__ or "").strip().splitlines()[0] if check.__doc__ else name
        RULES[name] = Rule(name=name, status=status, flag=flag, family=family, example=example, check=check,
                           summary=summary)
        return check

    return register


def make_verdict(name: str, message: str, *, status: str | None = None, flags: tuple[str, ...] | None = None,
             log: str = "") -> Verdict:
    entry = RULES[name]
    if flags is None:
        flags = (entry.flag,) if entry.flag else ()
    return Verdict(rule=name, status=status or entry.status, message=message, flags=flags, log=log)


@dataclass
class Findings:
    """The flag-only verdicts of one evaluation, in the order the rules found them."""

    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def flags(self) -> list[str]:
        return list(dict.fromkeys(flag for v in self.verdicts for flag in v.flags))

    @property
    def rules(self) -> list[str]:
        return list(dict.fromkeys(v.rule for v in self.verdicts))


def enforce(verdict: Verdict | None, findings: Findings | None = None) -> None:
    """Act on a rule's answer: nothing, a flag noted in `findings`, or the end of the evaluation."""
    if verdict is None:
        return
    if verdict.status == FLAGGED:
        if findings is None:
            raise ValueError(f"rule {verdict.rule} flags, and there is nowhere to note it")
        findings.verdicts.append(verdict)
        return
    raise (ProblemCodeFailed if verdict.rule == "problem_code_failed" else VerdictReached)(verdict)


def known_flag(name: object) -> str:
    """A flag name from a candidate's process: kept when it is one of ours, else "violation"."""
    return name if isinstance(name, str) and name in FLAGS else "violation"



TABLE_BEGIN, TABLE_END = "<!-- rules:begin (python -m kernelopt.sandbox.rules) -->", "<!-- rules:end -->"


def markdown_table() -> str:
    """The registry as docs/referee.md's table of rules."""
    lines = ["| rule | status | flag | family | example (tests/adversarial/) | what it checks |",
             "| --- | --- | --- | --- | --- | --- |"]
    for entry in RULES.values():
        example = f"`{entry.example}`" if entry.example else f"none: {NO_CORPUS_EXAMPLE.get(entry.name, '?')}"
        lines.append(f"| `{entry.name}` | {entry.status} | {entry.flag or ''} | {entry.family} | {example} | "
                     f"{entry.summary} |")
    return "\n".join(lines)

"""The adversarial corpus's files: where they lie, and the strict parser of the `# key: value`
header each candidate starts with (which problem it targets and what the referee must conclude).
tests/test_adversarial.py runs the cases; the docker, escape and bad-input tests and the
benchmarks that replay the corpus read them through it too."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt.sandbox import results, rules

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parent / "adversarial"
TEMPLATES = CORPUS / "templates"
PROBLEMS = REPO / "examples" / "level1"
# Where a header's `problem:` is looked up, in order: the examples, then problems written for the
# corpus (tests/adversarial/problems/, e.g. the degenerate losses and means).
CORPUS_PROBLEMS = CORPUS / "problems"
PROBLEM_DIRS = (PROBLEMS, CORPUS_PROBLEMS)

STATUSES = {"correct", "incorrect", "compile_error", "runtime_error", "timeout", "rejected"}
FLAGS = results.FLAGS  # the canonical list: kernelopt.sandbox.results.Flag
KINDS = {"pytorch", "cpp_extension", "cuda_extension", "triton", "nvrtc_kernel", "cuda_graph",
         "library_setting", "torch_compile"}
MARKERS = {"gpu", "gpu_timing", "slow", "bwrap", "cupy", "triton"}  # cupy, triton: the case imports that package
# key -> may it appear more than once
HEADER_KEYS = {
    "problem": False,
    "expect-status": False,
    "expect-not-status": False,
    "expect-flag": True,
    "expect-rule": False,
    "expect-kind": True,
    "marker": True,
    "timeout": False,
    "memory-limit": False,
    "precision-policy": False,
    "speedup-min": False,
    "speedup-max": False,
    "no-gain-max": False,
    "family": False,
    "why": False,
}
DEFAULT_TIMEOUT = 120.0

_KEY_LINE = re.compile(r"^#\s?(?P<key>[a-z][a-z0-9-]*):\s*(?P<value>.*?)\s*$")
_CONTINUATION = re.compile(r"^#\s{2,}\S")


class HeaderError(ValueError):
    pass


@dataclass
class Case:
    path: Path
    problem: str
    statuses: set[str] = field(default_factory=set)
    not_statuses: set[str] = field(default_factory=set)
    flags: list[str] = field(default_factory=list)
    rule: str | None = None  # the rule of kernelopt/sandbox/rules/ the verdict must name
    kinds: list[str] = field(default_factory=list)
    markers: set[str] = field(default_factory=set)
    timeout: float = DEFAULT_TIMEOUT
    memory_limit: int | None = None
    precision_policy: str | None = None
    speedup_min: float | None = None
    speedup_max: float | None = None
    no_gain_max: float | None = None
    family: str = ""
    why: str = ""

    @property
    def rel(self) -> str:
        return self.path.relative_to(CORPUS).as_posix()


def read_header(path: Path) -> list[tuple[str, str]]:
    """The (key, value) pairs of the leading comment block; continuation lines are joined."""
    pairs: list[tuple[str, str]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.startswith("#"):
            break
        match = _KEY_LINE.match(line)
        if match:
            pairs.append((match["key"], match["value"]))
        elif _CONTINUATION.match(line) and pairs:
            key, value = pairs[-1]
            pairs[-1] = (key, f"{value} {line[1:].strip()}")
        elif line.strip() == "#":
            continue
        else:
            raise HeaderError(f"{path}:{lineno}: unrecognised header line {line!r}")
    return pairs


def parse_case(path: Path) -> Case:
    """Strictly parse and validate a candidate's header."""
    pairs = read_header(path)
    if not pairs:
        raise HeaderError(f"{path}: no header")
    seen: dict[str, int] = {}
    for key, _ in pairs:
        if key not in HEADER_KEYS:
            raise HeaderError(f"{path}: unknown header key {key!r} (known: {sorted(HEADER_KEYS)})")
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1 and not HEADER_KEYS[key]:
            raise HeaderError(f"{path}: header key {key!r} given more than once")
    values: dict[str, list[str]] = {}
    for key, value in pairs:
        if not value:
            raise HeaderError(f"{path}: header key {key!r} has no value")
        values.setdefault(key, []).append(value)

    def words(key: str) -> list[str]:
        return [word for value in values.get(key, []) for word in value.split()]

    def number(key: str, kind=float):
        if key not in values:
            return None
        try:
            return kind(values[key][0])
        except ValueError:
            raise HeaderError(f"{path}: {key} must be a {kind.__name__}: {values[key][0]!r}")

    if "problem" not in values:
        raise HeaderError(f"{path}: missing `problem`")
    problem = values["problem"][0]
    if problem_path(problem) is None:
        raise HeaderError(f"{path}: problem {problem!r} is not a file in "
                          f"{' or '.join(str(d) for d in PROBLEM_DIRS)}")
    case = Case(path=path, problem=problem)
    case.statuses = set(words("expect-status"))
    case.not_statuses = set(words("expect-not-status"))
    if not case.statuses and not case.not_statuses:
        raise HeaderError(f"{path}: needs expect-status or expect-not-status")
    for status in case.statuses | case.not_statuses:
        if status not in STATUSES:
            raise HeaderError(f"{path}: unknown status {status!r}")
    if case.statuses & case.not_statuses:
        raise HeaderError(f"{path}: a status is both expected and excluded")
    case.flags = words("expect-flag")
    for flag in case.flags:
        if flag not in FLAGS:
            raise HeaderError(f"{path}: unknown flag {flag!r}")
    if "expect-rule" in values:
        case.rule = values["expect-rule"][0]
        if case.rule not in rules.RULES:
            raise HeaderError(f"{path}: unknown rule {case.rule!r} (kernelopt/sandbox/rules/)")
    case.kinds = words("expect-kind")
    for kind in case.kinds:
        if kind not in KINDS:
            raise HeaderError(f"{path}: unknown optimization kind {kind!r}")
    case.markers = set(words("marker"))
    for marker in case.markers:
        if marker not in MARKERS:
            raise HeaderError(f"{path}: unknown marker {marker!r}")
    timeout = number("timeout")
    if timeout is not None:
        if timeout <= 0:
            raise HeaderError(f"{path}: timeout must be positive")
        case.timeout = timeout
    case.memory_limit = number("memory-limit", int)
    if case.memory_limit is not None and case.memory_limit <= 0:
        raise HeaderError(f"{path}: memory-limit must be positive")
    if "precision-policy" in values:
        case.precision_policy = values["precision-policy"][0]
        if case.precision_policy not in ("flag", "reject"):
            raise HeaderError(f"{path}: precision-policy must be flag or reject")
    case.speedup_min = number("speedup-min")
    case.speedup_max = number("speedup-max")
    if (case.speedup_min is not None or case.speedup_max is not None) and (
        case.statuses and "correct" not in case.statuses
    ):
        raise HeaderError(f"{path}: speedup bounds only apply to a correct verdict")
    case.no_gain_max = number("no-gain-max")
    if case.no_gain_max is not None and ("correct" in case.statuses or case.no_gain_max > 1.25):
        raise HeaderError(f"{path}: no-gain-max is for a hack whose trick needs a quiet host (at most 1.25, "
                          "the range of exact copies)")
    case.family = values.get("family", [""])[0]
    case.why = values.get("why", [""])[0]
    if not case.family or not case.why:
        raise HeaderError(f"{path}: every case documents its `family` and `why`")
    return case


def problem_path(problem: str) -> Path | None:
    """The file of a header's `problem:` (the first of PROBLEM_DIRS that has it), or None."""
    for folder in PROBLEM_DIRS:
        path = folder / f"{problem}.py"
        if path.is_file():
            return path
    return None


def discover() -> list[Path]:
    """Every candidate file: *.py under the corpus, except templates/, problems/ and hidden/_
    folders."""
    found = []
    for path in sorted(CORPUS.rglob("*.py")):
        parts = path.relative_to(CORPUS).parts
        if parts[0] in ("templates", "problems") or any(p.startswith((".", "_")) for p in parts):
            continue
        found.append(path)
    return found

"""A KernelBench-format problem file turned into a validated `Problem`.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`, usually
with module-level size constants. Loading checks the file statically (it parses, the three names
are defined at top level); whether `get_inputs()` actually runs is checked where the reference
executes, inside the sandbox, and reported as a `ProblemError` too.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from kernelopt.kernelbench import shapes as shape_declarations
from kernelopt.kernelbench import syntax
from kernelopt.kernelbench import training
from kernelopt.kernelbench.shapes import Shape

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")

# "19_ReLU.py" -> id 19, name "ReLU"; "level1" / "level_2" in a parent folder -> level.
_FILE_NAME = re.compile(r"^(?P<id>\d+)_(?P<name>.+)$")
_LEVEL_DIR = re.compile(r"^level_?(?P<level>\d+)$", re.IGNORECASE)


class ProblemError(ValueError):
    """A problem file that cannot be used. The message names the file and the cause."""

    # The health probe's outcome (Health.as_dict()) when it ran before the reference failed
    # (a Ray actor's answer, cluster/pool.py); None otherwise.
    health: dict | None = None

    def __init__(self, path: str | Path, cause: str):
        self.path = str(path)
        self.cause = cause
        super().__init__(f"problem {self.path}: {cause}")


# How a reference worker's traceback names its copy of the problem (sandbox/batch.py's scratch).
_WORKER_COPY = re.compile(r'File "[^"]*/reference/problem\.py"')


def reference_failure(problem: Problem, error: str) -> ProblemError:
    """The reference failed in its worker: the error, with the worker's copy of the problem named
    as the user's file where the copy is that file's text, so its line numbers are the file's. A
    problem derived from the file (one of its configurations, its training step) keeps the copy's
    name: its lines are not the file's."""
    try:
        unchanged = Path(problem.path).read_text(encoding="utf-8") == problem.source
    except (OSError, UnicodeDecodeError):
        unchanged = False
    if unchanged:
        error = _WORKER_COPY.sub(lambda _: f'File "{problem.path}"', error)
    return ProblemError(problem.path, f"the reference failed: {error.strip()}")


@dataclass(frozen=True)
class Problem:
    """One reference program. `source` is the file's text; `content_hash` its SHA-256;
    `shapes` the input configurations it declares (shapes.py; empty for a plain file)."""

    path: str
    source: str
    name: str
    problem_id: int | None
    level: int | None
    content_hash: str
    shapes: tuple[Shape, ...] = ()
    training_pass: str = "forward"  # the file's PASS (training.py)

    @property
    def short_hash(self) -> str:
        return self.content_hash[:12]

    @property
    def shown_source(self) -> str:
        """The file as prompts and agent tools show it: without its held-out configurations."""
        return shape_declarations.shown_source(self.source)

    def for_shape(self, shape: Shape) -> Problem:
        """This problem as the one configuration `shape`: a plain problem of its own."""
        source = shape_declarations.source_for(self.source, shape)
        return self._derived(source, training_pass=self.training_pass)

    def for_training(self) -> Problem:
        """This problem's training step (training.py) as a plain forward problem of its own."""
        return self._derived(training.problem_source(self.source), training_pass="forward")

    def _derived(self, source: str, training_pass: str) -> Problem:
        return Problem(path=self.path, source=source, name=self.name, problem_id=self.problem_id,
                       level=self.level, content_hash=hashlib.sha256(source.encode("utf-8")).hexdigest(),
                       training_pass=training_pass)


def load_problem(path: str | Path) -> Problem:
    """Read and statically validate a KernelBench-format problem file."""
    path = Path(path)
    if not path.is_file():
        raise ProblemError(path, "file not found")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(path, f"cannot read file: {exc}") from exc
    return problem_from_source(source, path=str(path))


def problem_from_source(source: str, path: str = "<memory>", name: str | None = None) -> Problem:
    """Validate problem source text that did not come from a file (e.g. a service request)."""
    declared, training_pass = check_problem_source(source, path)
    stem = Path(path).stem
    match = _FILE_NAME.match(stem)
    problem_id = int(match["id"]) if match else None
    derived_name = match["name"] if match else stem
    return Problem(
        path=path,
        source=source,
        name=name or derived_name,
        problem_id=problem_id,
        level=_level_from_path(path),
        content_hash=hashlib.sha256(source.encode("utf-8")).hexdigest(),
        shapes=tuple(declared),
        training_pass=training_pass,
    )


def check_problem_source(source: str, path: str) -> tuple[list[Shape], str]:
    """Raise ProblemError unless the source parses and defines the KernelBench names (and any
    configurations and pass it declares are usable); returns those configurations and the pass."""
    try:
        tree = syntax.parse(source, filename=path)
    except SyntaxError as exc:
        raise ProblemError(path, f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise ProblemError(path, f"not a Python program: {exc or type(exc).__name__}") from exc
    defined = _top_level_definitions(tree)
    missing = [name for name in REQUIRED_NAMES if name not in defined]
    if missing:
        raise ProblemError(path, "missing top-level definition of " + ", ".join(missing))
    if defined["Model"] != "class":
        raise ProblemError(path, "`Model` must be a class (an nn.Module subclass)")
    try:
        return shape_declarations.declared(tree), training.declared_pass(tree)
    except (shape_declarations.ShapeError, training.PassError) as exc:
        raise ProblemError(path, str(exc)) from None


def _top_level_definitions(tree: ast.Module) -> dict[str, str]:
    """Names bound at module level, mapped to how: 'class', 'function' or 'assign'."""
    defined: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            defined[node.name] = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined[node.name] = "function"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    defined[target.id] = "assign"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                defined[(alias.asname or alias.name).split(".")[0]] = "import"
    return defined


def _level_from_path(path: str) -> int | None:
    for part in reversed(Path(path).parent.parts):
        match = _LEVEL_DIR.match(part)
        if match:
            return int(match["level"])
    return None

"""Several input configurations for one problem: `SHAPES` and `HELD_OUT_SHAPES`.

A KernelBench problem has one input size, set by module-level constants that `get_inputs()`
and `get_init_inputs()` read. A problem may declare more configurations as literal lists of
overrides of those constants:

    batch_size = 16
    dim = 16384
    SHAPES = [{}, {"batch_size": 128, "dim": 4096}]        # {}: the file's own constants
    HELD_OUT_SHAPES = [{"batch_size": 7, "dim": 3001}]     # judged, never shown in a prompt

A plain KernelBench file is one configuration, and a file with SHAPES stays a valid KernelBench
file (other tools see its own constants). Each configuration is judged as its own problem: the
file with its constants' assignments replaced (so constants computed from them follow) and the
declarations removed. The declarations are read statically (ast.literal_eval): the host never
runs problem code to learn them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

SHOWN = "SHAPES"
HELD_OUT = "HELD_OUT_SHAPES"
SELECTIONS = ("all", "shown", "held-out")


class ShapeError(ValueError):
    """A declaration that cannot be used; the message says what to change."""


@dataclass(frozen=True)
class Shape:
    """One input configuration: the constants it overrides, and whether prompts may show it."""

    overrides: tuple[tuple[str, object], ...]
    held_out: bool = False

    @property
    def name(self) -> str:
        """`batch_size=128 dim=4096`, or `default` for the file's own constants."""
        return " ".join(f"{key}={value!r}" for key, value in self.overrides) or "default"

    def as_dict(self) -> dict:
        return {"name": self.name, "held_out": self.held_out, "overrides": dict(self.overrides)}


def declared(tree: ast.Module) -> list[Shape]:
    """The configurations a parsed problem file declares, shown first; [] for a plain file.
    Raises ShapeError for a declaration that is not a literal list of overrides of constants
    the file assigns at top level."""
    constants = _top_level_constants(tree)
    found: list[Shape] = []
    for name, held_out in ((SHOWN, False), (HELD_OUT, True)):
        for node in _declarations(tree, name):
            found.extend(_parse_list(node, name, held_out, constants))
    if found and not any(not shape.held_out for shape in found):
        raise ShapeError(f"{HELD_OUT} needs {SHOWN} beside it: a search must see at least one configuration")
    _check_own_lines(tree, {SHOWN, HELD_OUT} | {key for shape in found for key, _ in shape.overrides})
    names = [shape.name for shape in found]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ShapeError(f"configuration declared twice: {', '.join(repeated)}")
    return found


def select(shapes: list[Shape], which: str) -> list[Shape]:
    """The configurations `--shapes` names: all, shown, held-out, or 1-based positions in
    declaration order (shown first), e.g. "1,3"."""
    which = which.strip()
    if which == "all":
        return list(shapes)
    if which == "shown":
        return [s for s in shapes if not s.held_out]
    if which == "held-out":
        return [s for s in shapes if s.held_out]
    try:
        positions = [int(part) for part in which.split(",") if part.strip()]
    except ValueError:
        raise ShapeError(f"--shapes {which!r}: say all, shown, held-out, or positions such as 1,3") from None
    if not positions or any(p < 1 or p > len(shapes) for p in positions):
        raise ShapeError(f"--shapes {which!r}: the problem declares {len(shapes)} configuration(s), "
                         f"numbered from 1")
    return [shapes[p - 1] for p in dict.fromkeys(positions)]


def source_for(source: str, shape: Shape) -> str:
    """The problem file as one configuration: each overridden constant's top-level assignment
    replaced by the configuration's value, and the declarations removed."""
    tree = ast.parse(source)
    values = dict(shape.overrides)
    replacements: dict[int, tuple[int, str]] = {}  # first line -> (last line, new text)
    for node in tree.body:
        target = _assigned_name(node)
        if target in (SHOWN, HELD_OUT):
            replacements[node.lineno] = (_last_line(node), "")
        elif target in values:
            replacements[node.lineno] = (_last_line(node), f"{target} = {values[target]!r}  # kernelopt shape\n")
    return _replace_lines(source, replacements)


def shown_source(source: str) -> str:
    """The file as a prompt may show it: the held-out declaration removed (shown ones stay)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    cut = {node.lineno: (_last_line(node), "") for node in tree.body if _assigned_name(node) == HELD_OUT}
    return _replace_lines(source, cut) if cut else source


# -- parsing ---------------------------------------------------------------------------------

def _declarations(tree: ast.Module, name: str) -> list[ast.expr]:
    return [node.value for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _assigned_name(node) == name]


def _parse_list(node: ast.expr, name: str, held_out: bool, constants: set[str]) -> list[Shape]:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        raise ShapeError(f"{name} must be a literal list of dicts (no names or calls in it), "
                         f"e.g. {name} = [{{'batch_size': 16}}]") from None
    if not isinstance(value, (list, tuple)) or not value:
        raise ShapeError(f"{name} must be a non-empty list of dicts")
    shapes = []
    for position, entry in enumerate(value, 1):
        if not isinstance(entry, dict):
            raise ShapeError(f"{name}[{position - 1}] is a {type(entry).__name__}, not a dict of constants")
        unknown = [key for key in entry if not isinstance(key, str) or key not in constants]
        if unknown:
            raise ShapeError(f"{name}[{position - 1}] sets {', '.join(map(repr, unknown))}, which the file does "
                             f"not assign at top level (a configuration overrides the file's own constants)")
        shapes.append(Shape(tuple(entry.items()), held_out))
    return shapes


def _check_own_lines(tree: ast.Module, names: set[str]) -> None:
    """A configuration replaces whole lines: each statement it rewrites must have its own."""
    for node in tree.body:
        name = _assigned_name(node)
        if name not in names:
            continue
        span = range(node.lineno, _last_line(node) + 1)
        if any(other is not node and (other.lineno in span or _last_line(other) in span) for other in tree.body):
            raise ShapeError(f"`{name} = ...` shares a line with another statement: give it a line of its own")


def _top_level_constants(tree: ast.Module) -> set[str]:
    return {name for node in tree.body if (name := _assigned_name(node)) is not None} - {SHOWN, HELD_OUT}


def _assigned_name(node: ast.stmt) -> str | None:
    """The name a top-level `NAME = ...` or `NAME: T = ...` binds; None for anything else."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id
    return None


def _last_line(node: ast.stmt) -> int:
    return node.end_lineno if node.end_lineno is not None else node.lineno


def _replace_lines(source: str, replacements: dict[int, tuple[int, str]]) -> str:
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    number = 1
    while number <= len(lines):
        if number in replacements:
            last, text = replacements[number]
            out.append(text)
            number = last + 1
        else:
            out.append(lines[number - 1])
            number += 1
    return "".join(out)

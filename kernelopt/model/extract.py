"""Hot spots written as standalone KernelBench-format problems, plus manifest.json.

An extracted problem holds the model file's code (its own `Model`, `get_inputs` and
`get_init_inputs` cut out), then `class Model(<the spot's class>)`, built from the arguments
the model's constructor passed to that submodule (recorded while building the model), and a
`get_inputs` that makes the shapes and dtypes the profile saw. What cannot be written that way
is listed with the reason: a class defined inside a function (a closure), constructor or call
arguments that are not literals (modules, functions, tensors), keyword arguments in the call,
or an `if`/`while` in a forward that tests tensor values (data-dependent control flow).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt.kernelbench import problem_from_source, syntax
from kernelopt.kernelbench.problem import REQUIRED_NAMES
from kernelopt.kernelbench.shapes import HELD_OUT, SHOWN
from kernelopt.kernelbench.training import PASS_NAME
from kernelopt.model.loading import InitCall, LoadedModel, record_constructors

_DATA_TESTS = re.compile(r"\.(item|any|all|tolist|nonzero)\(|\btorch\.(any|all|equal|isnan|isinf)\(|\bbool\(")


class NotExtractable(Exception):
    """Why a hot spot cannot be written as a standalone problem."""


@dataclass
class Extracted:
    path: str
    share: float
    file: str | None = None
    source: str | None = None
    reason: str | None = None
    constructor: str | None = None      # the expression that builds the spot, e.g. "MLP(128, 512)"
    imports: str = ""                   # what that expression needs beyond the model file
    init_args: list = field(default_factory=list)   # get_init_inputs(): what a candidate is built with
    inputs: list = field(default_factory=list)      # the call signature the problem reproduces
    signatures: int = 1                             # distinct call signatures seen (the most frequent kept)
    shapes: int = 1                                 # input configurations the problem declares

    def manifest_row(self) -> dict:
        row = {"module": self.path, "share": self.share}
        if self.file:
            row.update(file=self.file, constructor=self.constructor, init_args=self.init_args,
                       inputs=self.inputs, signatures=self.signatures, shapes=self.shapes)
        else:
            row["reason"] = self.reason
        return row


def extract_spots(loaded: LoadedModel, spots, top: int | None = None, training_pass: str = "forward") -> list[Extracted]:
    """The top hot spots (a ModelProfile's, in order), each extracted or refused with a reason;
    `training_pass`: what the problems ask to be judged (kernelbench/training.py's PASS)."""
    constructors = record_constructors(loaded)
    chosen = spots if top is None else spots[:top]
    out = []
    for index, spot in enumerate(chosen, 1):
        item = Extracted(path=spot.path, share=spot.share, inputs=spot.inputs, signatures=spot.signatures)
        try:
            item.source, item.constructor, item.imports, item.init_args = problem_source(
                loaded, spot, constructors.get(spot.path), training_pass)
            item.file = f"{index:02d}_{file_stem(spot.path)}.py"
            item.shapes = max(1, len(problem_from_source(item.source, item.file).shapes))
        except NotExtractable as exc:
            item.reason = str(exc)
        out.append(item)
    return out


def write_extracted(items: list[Extracted], out_dir: Path, model_path: str, profile_json: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in items:
        if item.file and item.source is not None:
            (out_dir / item.file).write_text(item.source, encoding="utf-8")
    manifest = {"model": str(model_path), "device": profile_json["device"],
                "forward_ms": profile_json["forward_ms"],
                "problems": [i.manifest_row() for i in items if i.file],
                "not_extracted": [i.manifest_row() for i in items if not i.file]}
    path = out_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def file_stem(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_") or "model"


def problem_source(loaded: LoadedModel, spot, call: InitCall | None,
                   training_pass: str = "forward") -> tuple[str, str, str, list]:
    """(source, constructor expression, its imports, init args) or NotExtractable."""
    module = loaded.model.get_submodule(spot.path)
    cls = type(module)
    if "<locals>" in cls.__qualname__:
        raise NotExtractable(f"its class {cls.__qualname__} is defined inside a function (a closure): "
                             "its code cannot be written at a file's top level")
    if call is None:
        raise NotExtractable("its constructor call was not seen while building the model (made by a factory "
                             "or copied), so its arguments are unknown")
    if spot.kwargs:
        raise NotExtractable(f"it is called with keyword arguments ({', '.join(spot.kwargs)}); a problem's "
                             "get_inputs() gives positional arguments only")
    check_control_flow(loaded, module)
    for arg in spot.inputs:
        if "shape" not in arg and arg["type"] not in ("int", "float", "bool", "str", "NoneType", "tuple", "list"):
            raise NotExtractable(f"it is called with a {arg['type']} argument, which cannot be written as a literal")
    constructor, import_lines, args, init = spot_constructor(loaded, call)
    base = class_name(loaded, cls, set())
    inputs, configurations = input_configurations(spot.inputs, getattr(spot, "other_inputs", []))
    body = model_code_without_entry_points(loaded.problem.source)
    header = (f'"""Hot spot `{spot.path}` ({cls.__name__}) of {Path(loaded.problem.path).name}, '
              f"{spot.share:.1%} of its forward time\n(`kernelopt model extract`). The model's code "
              f"follows; the problem is its `{spot.path}`\nsubmodule, on the inputs it was seen with."
              f'\n"""\n\n')
    asked = (f"# Judged as a training step (docs/training.md).\nPASS = {training_pass!r}\n\n"
             if training_pass != "forward" else "")
    source = (header + import_lines + body.rstrip() + "\n\n\n# --- the hot spot as a problem ---\n\n" + asked +
              f"class Model({base}):\n"
              f'    """`{spot.path}` of the model: {constructor}."""\n'
              + init + "\n\n" + configurations +
              "def get_inputs():\n"
              f"    return [{', '.join(inputs)}]\n\n\n"
              "def get_init_inputs():\n"
              f"    return {repr_list(args)}\n")
    return source, constructor, import_lines, args


def spot_constructor(loaded: LoadedModel, call: InitCall) -> tuple[str, str, list, str]:
    """(the expression that builds the spot, the imports it needs, the problem's init inputs, the
    extracted Model's __init__ ("" when it inherits its class's)). Literal positional arguments
    are the init inputs and keyword arguments are baked in; where modules are among the
    arguments (nn.Sequential's), everything is baked in and the init inputs are empty."""
    imports: set[str] = set()
    constructor = call_expression(loaded, call, imports)
    base = class_name(loaded, call.cls, imports)
    try:
        args = [literal(a, "constructor argument") for a in call.args]
        kwargs = {k: literal(v, f"constructor argument {k}=") for k, v in call.kwargs.items()}
        init = (f"\n    def __init__(self, *args):\n        super().__init__(*args, **{kwargs_literal(kwargs)})\n"
                if kwargs else "")
    except NotExtractable:
        args = []
        init = f"\n    def __init__(self):\n        super().__init__{constructor[len(base):]}\n"
    return constructor, "".join(sorted(imports)), args, init


def call_expression(loaded: LoadedModel, call: InitCall, imports: set[str]) -> str:
    """Source text that makes the same constructor call: literals as they are, modules given to
    it (nn.Sequential's) as their own constructor calls; NotExtractable for anything else."""
    if "<locals>" in call.cls.__qualname__:
        raise NotExtractable(f"a module given to its constructor has a class defined inside a function "
                             f"({call.cls.__qualname__})")
    parts = [value_expression(loaded, a, imports) for a in call.args]
    parts += [f"{k}={value_expression(loaded, v, imports)}" for k, v in call.kwargs.items()]
    return f"{class_name(loaded, call.cls, imports)}({', '.join(parts)})"


def value_expression(loaded: LoadedModel, value, imports: set[str]) -> str:
    if isinstance(value, InitCall):
        return call_expression(loaded, value, imports)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(value_expression(loaded, v, imports) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(literal(value, "constructor argument"))


def base_is_imported(loaded, cls) -> bool:
    return loaded.namespace.get(cls.__name__) is not cls


def class_name(loaded: LoadedModel, cls, imports: set[str]) -> str:
    """The name the file uses for the class; an import line added when it needs one."""
    if not base_is_imported(loaded, cls):
        return cls.__name__
    alias = f"_Spot{cls.__name__}"
    imports.add(f"from {cls.__module__} import {cls.__qualname__} as {alias}\n")
    return alias


def model_code_without_entry_points(source: str) -> str:
    """The model file minus its top-level Model, get_inputs and get_init_inputs (decorators and
    all), comments and everything else kept."""
    tree = syntax.parse(source)
    lines = source.splitlines()
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in REQUIRED_NAMES:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            drop.update(range(first - 1, node.end_lineno or node.lineno))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in (SHOWN, HELD_OUT)
                                                  for t in node.targets):
            drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))  # the model's, not the spot's
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == PASS_NAME for t in node.targets):
            drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))  # the spot's own PASS follows
    kept = [line for i, line in enumerate(lines) if i not in drop]
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(kept))


def check_control_flow(loaded: LoadedModel, module) -> None:
    """Refuses a forward (of the spot or a submodule of it, from the model file) whose `if` or
    `while` tests tensor values: random inputs could take another branch than the model's."""
    seen = set()
    for sub in module.modules():
        cls = type(sub)
        if cls in seen or loaded.namespace.get(cls.__name__) is not cls:
            continue
        seen.add(cls)
        try:
            code = textwrap.dedent(inspect.getsource(cls.forward))
        except (OSError, TypeError):
            continue
        for node in ast.walk(syntax.parse(code)):
            if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
                test = ast.unparse(node.test)
                if _DATA_TESTS.search(test):
                    raise NotExtractable(f"{cls.__name__}.forward has data-dependent control flow "
                                         f"(`{test}` tests tensor values)")


def literal(value, what: str):
    """A value that can be written in a file as it is (ints, floats, strings, dtypes, tuples...)."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(literal(v, what) for v in value)
    if isinstance(value, dict):
        return {literal(k, what): literal(v, what) for k, v in value.items()}
    raise NotExtractable(f"a {what} is a {type(value).__name__}, which cannot be written as a literal")


def repr_list(values) -> str:
    return "[" + ", ".join(repr(v) for v in values) + "]"


def kwargs_literal(kwargs: dict) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in kwargs.items()) + "}"


def input_configurations(common: list[dict], others: list[list[dict]]) -> tuple[list[str], str]:
    """get_inputs()'s argument expressions, and the module code before it: for a spot the model
    called with several sizes, a constant per tensor argument's shape and a SHAPES declaration
    (kernelbench/shapes.py) of the other sizes seen, most frequent first; else nothing."""
    tensors = [i for i, arg in enumerate(common) if "shape" in arg]
    configurations: list[dict] = []
    for args in others:
        changed = {f"input{i}_shape": tuple(args[i]["shape"]) for i in tensors
                   if args[i]["shape"] != common[i]["shape"]}
        if changed and changed not in configurations:
            configurations.append(changed)
    if not configurations:
        return [input_expression(a) for a in common], ""
    constants = "".join(f"input{i}_shape = {tuple(common[i]['shape'])!r}\n" for i in tensors)
    declared = ("# The sizes the model called this spot with, the most frequent first: a kernel must\n"
                "# serve each (kernelopt judges every configuration).\n"
                f"SHAPES = {[{}] + configurations!r}\n\n\n")
    expressions = [input_expression(a, f"input{i}_shape" if i in tensors else None) for i, a in enumerate(common)]
    return expressions, constants + declared


def input_expression(arg: dict, shape_name: str | None = None) -> str:
    if "shape" not in arg:
        return arg["value"]
    shape, dtype = shape_name or tuple(arg["shape"]), f"torch.{arg['dtype']}"
    if arg["dtype"] == "bool":
        return f"torch.randint(0, 2, {shape}).bool()"
    if "low" in arg:   # integers (indices, token ids): the range seen
        return f"torch.randint({arg['low']}, {arg['high'] + 1}, {shape}, dtype={dtype})"
    return f"torch.randn({shape}, dtype={dtype})"

"""Replacements for hot spots composed into one `ModelNew` for the whole model, and judged end to
end by the referee against the model file itself.

The composed file is the model file verbatim, the replacements' programs (as strings, each run
as a module of its own), and a `ModelNew` that builds `Model`, then puts each replacement in
place of its submodule with the submodule's own parameters (runtime_template.py). A replacement
that breaks the model (correct alone, wrong in context: a dropped residual, a layout the model
relies on, another dtype) makes the whole composition incorrect: then each replacement is judged
in context alone, the failing ones are dropped with the referee's reason, and the rest are
composed and judged again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernelopt.model.runtime_template import RUNTIME

if TYPE_CHECKING:
    from kernelopt.sandbox.results import EvalResult


@dataclass
class Replacement:
    path: str
    source: str
    constructor: str           # the expression that builds the original submodule, e.g. "MLP(128, 512)"
    imports: str               # the import lines that expression needs beyond the model file
    init_args: list            # what the replacement's ModelNew is built with (the problem's init inputs)
    label: str = ""            # where it came from (a file, a run)


@dataclass
class Composition:
    source: str | None                       # the composed program (None: nothing survived)
    kept: list[str]                          # paths
    dropped: dict[str, str]                  # path -> why
    result: EvalResult | None = None         # the referee's verdict on `source`
    alone: dict[str, EvalResult] = field(default_factory=dict)   # path -> verdict of it alone in context


def composed_source(model_source: str, replacements: list[Replacement]) -> str:
    imports = "".join(sorted({line for r in replacements for line in r.imports.splitlines(keepends=True)}))
    builders = "".join(f"\n\ndef _spot_{i}():\n    return {r.constructor}\n" for i, r in enumerate(replacements))
    entries = ",\n".join(
        "    {" + f"'path': {r.path!r}, 'build': _spot_{i}, 'init_args': {r.init_args!r},\n"
        f"     'source': {r.source!r}" + "}"
        for i, r in enumerate(replacements))
    return (model_source.rstrip() + "\n\n\n# --- replacements (written by `kernelopt model compose`) ---\n"
            "import torch.nn as nn  # noqa: E402\n" + imports + builders +
            f"\n\n_REPLACEMENTS = [\n{entries}\n]\n" + RUNTIME)


def compose_and_verify(problem, replacements: list[Replacement], options, on_verdict=None) -> Composition:
    """Judges the composition of all `replacements`; where it is incorrect, each alone in context,
    then the survivors together. `problem`: the model file as a Problem."""
    from kernelopt.sandbox import Evaluator

    report = on_verdict or (lambda what, result: None)
    if not replacements:
        return Composition(None, [], {})
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        source = composed_source(problem.source, replacements)
        result = evaluator.evaluate(source)
        report("all", result)
        if result.correct:
            return Composition(source, [r.path for r in replacements], {}, result)
        dropped: dict[str, str] = {}
        alone: dict[str, EvalResult] = {}
        kept = []
        if len(replacements) == 1:
            alone[replacements[0].path] = result
        for r in replacements:
            verdict = alone.get(r.path)
            if verdict is None:
                verdict = evaluator.evaluate(composed_source(problem.source, [r]))
                alone[r.path] = verdict
                report(r.path, verdict)
            if verdict.correct:
                kept.append(r)
            else:
                dropped[r.path] = f"{verdict.status}: {first_line(verdict.message)}"
        if not kept:
            return Composition(None, [], dropped, None, alone)
        if len(kept) == 1:
            final, final_result = composed_source(problem.source, kept), alone[kept[0].path]
        else:
            final = composed_source(problem.source, kept)
            final_result = evaluator.evaluate(final)
            report("survivors", final_result)
        return Composition(final if final_result.correct else None, [r.path for r in kept] if final_result.correct else [],
                           dropped, final_result, alone)


def first_line(text: str, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line[:limit]


def replacement_for(loaded, constructors: dict, path: str, source: str, label: str = "") -> Replacement:
    """A Replacement for submodule `path` of the loaded model (its constructor call as recorded
    by loading.record_constructors); ValueError saying why when there is none."""
    from kernelopt.model.extract import NotExtractable, spot_constructor

    if not path:
        raise ValueError("the whole model is not a submodule: judge a candidate for it with `kernelopt eval`")
    try:
        loaded.model.get_submodule(path)
    except AttributeError:
        raise ValueError(f"the model has no submodule `{path}`") from None
    call = constructors.get(path)
    if call is None:
        raise ValueError(f"`{path}`: its constructor call was not seen while building the model")
    try:
        constructor, imports, args, _ = spot_constructor(loaded, call)
    except NotExtractable as exc:
        raise ValueError(f"`{path}`: {exc}") from None
    return Replacement(path, source, constructor, imports, args, label)

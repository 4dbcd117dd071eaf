"""Option groups that several commands share.

The referee's options are generated from EvalOptions' own fields (kernelopt/sandbox/results.py):
the flag from the field's name, the default from its default, the choices from a Literal
annotation, the type from the annotation and the help from its description, so that a default or
a choice list is written once, where the referee reads it. SPELLINGS lists where the command line
departs from the generated form. The other groups (endpoint, strategy, budget, LLM requests,
problem sets) belong to no model and are written out here, once.
"""

from __future__ import annotations

import argparse
import os
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal

from kernelopt.agent.strategies import STRATEGIES
from kernelopt.kernelbench.backends import BACKEND_CHOICES
from kernelopt.sandbox.results import EvalOptions


def parse_size(text: str) -> int:
    """'8G', '512M', '1.5GiB', '1000000' -> bytes (binary units), for argparse."""
    from kernelopt.sandbox.sizes import parse_size as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# EvalOptions fields as options ------------------------------------------------------------------

@dataclass(frozen=True)
class Spelling:
    """Where an EvalOptions field's option departs from the generated one."""

    flags: tuple[str, ...] = ()  # instead of --field-name
    metavar: str | None = None
    type: Callable[[str], Any] | None = None  # instead of the annotation's


SPELLINGS = {
    "isolation": Spelling(flags=("--isolation", "--sandbox")),  # --sandbox: an alias scripts use
    "target_precision": Spelling(flags=("--timing-precision",), metavar="P"),  # next to --timing-budget
    "memory_limit": Spelling(type=parse_size, metavar="SIZE"),  # 8G rather than a count of bytes
    "timeout": Spelling(metavar="S"),
    "timing_budget": Spelling(metavar="S"),
    "correctness_trials": Spelling(metavar="N"),
    "element_checks": Spelling(metavar="N"),
    "build_cache": Spelling(metavar="DIR"),
    "shapes": Spelling(metavar="WHICH"),
    "training_pass": Spelling(flags=("--pass",)),
}

# The referee's settings that eval and serve expose, in --help's order.
JUDGING_FIELDS = ("device", "timeout", "memory_limit", "correctness_trials", "element_checks", "atol", "rtol",
                  "max_rel_error", "precision_policy", "isolation", "image", "timing_budget", "target_precision", "pin_timing",
                  "seed", "build_mode", "build_cache", "profile", "training_pass", "shapes")

# Those an agent run (optimize, bench, generate) records and applies to each of its evaluations;
# its device is chosen once for the whole run, apart from these.
RUN_EVAL_FIELDS = ("timeout", "timing_budget", "correctness_trials", "isolation", "image", "build_mode", "profile",
                   "training_pass", "shapes")

# What an option means for an agent run beyond a single evaluation.
RUN_NOTES = {"profile": "; on by default with the refine, tree and evolve strategies, which show the model "
                        "the profile in their next prompts"}

FIELD_DEFAULT = object()  # add_field_option's `default` when the field's own applies


def add_field_option(group, name: str, *, flags: tuple[str, ...] = (), default: Any = FIELD_DEFAULT,
                     unset: bool = False, note: str = "") -> None:
    """The option that sets EvalOptions field `name` (dest: the field's name). `default` replaces
    the field's for a command with other needs; `unset` leaves the option None when it is not
    given, so that a stored run's settings or EvalOptions' default apply (the help names the latter)."""
    field = EvalOptions.model_fields[name]
    spelling = SPELLINGS.get(name, Spelling())
    value = field.default if default is FIELD_DEFAULT else default
    if field.annotation is bool:  # --name / --no-name
        group.add_argument(*(flags or spelling.flags or (flag_of(name),)), dest=name,
                           action=argparse.BooleanOptionalAction, default=None if unset else value,
                           help=help_text(field.description, None if unset else value) + note)
        return
    kind, choices = argument_kind(field.annotation)
    convert: Callable[[str], Any] | None = spelling.type or kind
    if kind in (int, float) and spelling.type is None and field.metadata:
        convert = bounded(kind, field.metadata)
    group.add_argument(*(flags or spelling.flags or (flag_of(name),)), dest=name, type=convert,
                       choices=choices, default=None if unset else value, metavar=spelling.metavar,
                       help=help_text(field.description, value) + note)


def bounded(kind: type, metadata: list) -> Callable[[str], Any]:
    """A number type for argparse that also keeps the field's bounds (gt, ge, le), so that a bad
    value is refused with the option's name rather than as a validation error of EvalOptions."""
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {'whole ' if kind is int else ''}number: {text!r}") from None
        for bound in metadata:
            for attribute, holds, says in (("gt", lambda v, b: v > b, "above"), ("ge", lambda v, b: v >= b, "at least"),
                                           ("le", lambda v, b: v <= b, "at most")):
                limit = getattr(bound, attribute, None)
                if limit is not None and not holds(value, limit):
                    raise argparse.ArgumentTypeError(f"must be {says} {limit}, not {text}")
        return value

    convert.__name__ = kind.__name__  # argparse names the type in its messages
    return convert


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def argument_kind(annotation) -> tuple[type | None, list | None]:
    """(argparse type, choices) for a field's annotation: Literal[...] gives the choices, `X | None`
    is X, int and float convert, str stays a string."""
    if typing.get_origin(annotation) is Literal:
        return None, list(typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return argument_kind(members[0])
    if annotation in (int, float):
        return annotation, None
    if annotation is str:
        return None, None
    raise TypeError(f"no command-line form for an EvalOptions field of type {annotation}")


def help_text(description: str | None, default: Any) -> str:
    """A field's description as --help shows it. A None default is not shown: the description says
    what happens without a value."""
    text = description or ""
    if default is not None:
        shown = f"{default:g}" if isinstance(default, float) else default
        text += f" (default {shown})"
    return text.replace("%", "%%")  # argparse formats help strings with %


def add_judging_options(p) -> None:
    """How candidates are judged: shared by eval and serve (whose requests are judged alike)."""
    for name in JUDGING_FIELDS:
        add_field_option(p, name)


def judging_options(args) -> dict:
    """The EvalOptions fields that add_judging_options' arguments set."""
    return {name: getattr(args, name) for name in JUDGING_FIELDS}


def add_run_eval_options(p, timeout_flags: tuple[str, ...] = ("--eval-timeout",)) -> None:
    """The referee's settings of an agent run. `timeout_flags`: bench keeps its --timeout."""
    ev = p.add_argument_group("evaluation")
    add_field_option(ev, "device")
    ev.add_argument("--backend", choices=BACKEND_CHOICES, default=None,
                    help="kernel language asked for: load_inline CUDA, CuPy (NVRTC), Triton or C++ "
                         "(default auto: cuda on GPUs, cpp on CPU)")
    for name in RUN_EVAL_FIELDS:
        add_field_option(ev, name, flags=timeout_flags if name == "timeout" else (), unset=True,
                         note=RUN_NOTES.get(name, ""))


def run_eval_settings(args) -> dict:
    """The RUN_EVAL_FIELDS given on the command line."""
    values = {name: getattr(args, name) for name in RUN_EVAL_FIELDS}
    return {name: value for name, value in values.items() if value is not None}


# the agent's options: optimize, bench (the agent over a set) and generate -------------------------
# agent_setup.apply_overrides turns them into an OptimizeConfig.

def add_endpoint_options(p) -> None:
    p.add_argument("--model", default=os.environ.get("KERNELOPT_MODEL"),
                   help="model name at the endpoint (default: $KERNELOPT_MODEL)")
    p.add_argument("--base-url", default=None,
                   help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL, "
                        "else OpenAI)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="environment variable holding the API key (default OPENAI_API_KEY)")


def add_strategy_options(p) -> None:
    # The registry's own names: strategies.py imports nothing heavy, so this costs no torch.
    p.add_argument("--strategy", choices=tuple(STRATEGIES), default="refine", help="search strategy (default refine)")
    search = p.add_argument_group("strategy options")
    search.add_argument("--window", type=int, default=None, help="best-of-n: samples in flight (default 4)")
    search.add_argument("--width", type=int, default=None, help="tree: children per expansion (default 2)")
    search.add_argument("--depth", type=int, default=None, help="tree: maximum depth (default 4)")
    search.add_argument("--beam", type=int, default=None, help="tree: nodes expanded per step (default 1)")
    search.add_argument("--population", type=int, default=None, help="evolve: children per generation (default 4)")
    search.add_argument("--exemplars", type=int, default=None, help="evolve: scored exemplars per prompt (default 3)")
    search.add_argument("--seed", type=int, default=None, help="evolve: RNG seed (default 0)")
    add_samples_options(search)
    search.add_argument("--critique", action="store_true",
                        help="ask the LLM for a diagnosis before each refinement (one more call each)")


def add_samples_options(group, required: bool = False) -> None:
    """--samples K, --turns T: the samples strategy's K independent chains of 1 + T turns."""
    group.add_argument("--samples", type=int, default=None, required=required, metavar="K",
                       help="samples: independent first attempts" + ("" if required else " (default 4)"))
    group.add_argument("--turns", type=int, default=None, metavar="T",
                       help="samples: refinements of each, with its own feedback (default 0); "
                       "agent: replies per conversation (default 8)")


# Budgets: an integer of at least 1 (a budget of 0 would start a run that can do nothing), or a
# number above 0.
positive_int = bounded(int, [types.SimpleNamespace(ge=1)])
positive_float = bounded(float, [types.SimpleNamespace(gt=0)])


def add_budget_options(p, title: str) -> None:
    budget = p.add_argument_group(title)
    budget.add_argument("--budget", type=positive_int, default=None, metavar="N", help="LLM calls (default 8)")
    budget.add_argument("--max-tokens-total", type=positive_int, default=None, metavar="N",
                        help="prompt + completion tokens")
    budget.add_argument("--max-cost", type=positive_float, default=None, metavar="USD",
                        help="dollars (needs --price or a price table entry for the model)")
    budget.add_argument("--max-evals", type=positive_int, default=None, metavar="N", help="evaluations")
    budget.add_argument("--max-wall", type=positive_float, default=None, metavar="S", help="wall-clock seconds")
    budget.add_argument("--target-speedup", type=float, default=None, metavar="X",
                        help="stop once a correct candidate reaches X")


def add_llm_options(p) -> None:
    llm = p.add_argument_group("LLM requests")
    llm.add_argument("--temperature", type=float, default=None,
                     help="sampling temperature sent with every request (default: the endpoint's)")
    llm.add_argument("--top-p", type=float, default=None,
                     help="nucleus sampling's top_p sent with every request (default: the endpoint's)")
    llm.add_argument("--max-tokens", type=int, default=None, help="completion tokens per call")
    llm.add_argument("--max-completion-tokens", type=int, default=None, help="for reasoning models")
    llm.add_argument("--reasoning-effort", default=None, help="for reasoning models: low, medium, high")
    llm.add_argument("--concurrency", type=int, default=None, help="LLM calls at once (default 4)")
    llm.add_argument("--llm-timeout", type=float, default=None, metavar="S", help="seconds per request (default 600)")
    llm.add_argument("--retries", type=int, default=None, metavar="N",
                     help="attempts per call on 429/5xx/timeouts (default 6)")
    llm.add_argument("--price", type=float, nargs=2, default=None, metavar=("IN", "OUT"),
                     help="dollars per million input and output tokens (for cost records and --max-cost)")
    llm.add_argument("--price-table", default=os.environ.get("KERNELOPT_PRICES"), metavar="FILE",
                     help='JSON {"model": [IN, OUT]} of prices per million tokens (default: $KERNELOPT_PRICES)')
    llm.add_argument("--reuse-answers", action="store_true",
                     help="answer a request an earlier run sent the same way from that run's answer (reproducible "
                          "reruns); by default every run asks the endpoint afresh, and only a resumed run replays "
                          "its own answers")
    llm.add_argument("--no-cache", action="store_true",
                     help="ask the endpoint afresh (the default; kept for scripts written before --reuse-answers)")


# problem sets: bench, baselines, generate, serve ---------------------------------------------------

def add_problem_set_options(p, required: bool = True) -> None:
    """--kernelbench, --level, --problems (optional for serve); selection.problem_set_from reads them."""
    p.add_argument("--kernelbench", required=required, default=None, metavar="SET",
                   help="a KernelBench checkout (KernelBench/level1..4), a folder of problem files, a .parquet "
                        "file or folder in the HuggingFace layout, or a dataset id in the local HF cache"
                        + ("" if required else " (default: none)"))
    p.add_argument("--level", default=None, help="levels to include, e.g. 1 or 1,2 (default: all)")
    p.add_argument("--problems", default=None, metavar="IDS", help="problem ids, e.g. 1,3,5-9 (default: all)")


def add_gpus_option(p) -> None:
    p.add_argument("--gpus", default=None, metavar="IDS",
                   help="run problems concurrently, one at a time per GPU: ids like 0,1 or 0-3, or all "
                        "(default: the single --device)")

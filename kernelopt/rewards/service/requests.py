"""Request bodies into work: JSON from /v1/evaluate and /v1/openrlhf, checked field by field,
becomes `EvalItem`s. Parsing by hand (not by validating a pydantic model) is deliberate: each
mistake gets a message that says what to send instead, which a trainer's log shows verbatim."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Literal, overload

from pydantic import ValidationError

from kernelopt.kernelbench import Problem, ProblemError, problem_from_source
from kernelopt.rewards.functions import RewardError, RewardFunction, make_reward
from kernelopt.rewards.service.catalog import ProblemCatalog
from kernelopt.rewards.service.errors import BadRequest
from kernelopt.sandbox.results import EvalOptions

# What decides where and how safely code runs (device, isolation, memory, builds, timeout), and
# the secret seeds, the advisory profiling pass (--profile: its cost) and the every-element check (a
# defence a request must not turn off) stay the operator's; the rest says how strictly and how long a candidate is
# judged, which a request may choose. A new EvalOptions field is therefore per-request unless it
# is listed here.
OPERATOR_OPTIONS = frozenset({"device", "timeout", "memory_limit", "isolation", "image", "seed", "pin_timing",
                              "keep_scratch", "build_mode", "build_cache", "profile", "element_checks"})
REQUEST_OPTIONS = tuple(name for name in EvalOptions.model_fields if name not in OPERATOR_OPTIONS)
EVALUATE_FIELDS = ("problem", "completion", "reward", "options")
# The most characters each text field may hold (docs/serve.md); --max-body caps the whole body.
TEXT_LIMITS = {"completion": 2 << 20, "query": 2 << 20, "prompts": 2 << 20, "responses": 2 << 20, "labels": 1 << 20,
               "problem.source": 1 << 20, "problem.id": 256, "problem.name": 256, "reward": 256}
# Per-request tolerances: finite, and within these bounds (inclusive; max_rel_error above 0).
TOLERANCE_RANGES = {"atol": (0.0, 1.0), "rtol": (0.0, 1.0), "max_rel_error": (0.0, 1.0)}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Special tokens a decoded query may end with (OpenRLHF decodes with skip_special_tokens=False),
# written backwards: matched at the start of the reversed query, so that finding the trailing run
# takes one pass (a search for it from the front would rescan whitespace from every position).
_TRAILING_SPECIAL_TOKENS_REVERSED = re.compile(r"(?:\s*(?:>\|[^|<>\s]{1,40}\|<|>s/<|>soe<|>nrut_fo_dne<))+\s*")
# ... and may start with (a BOS the tokenizer added before the prompt): a few tokens at most, so
# the text before the prompt is matched only up to _MAX_LEADING characters.
_LEADING_SPECIAL_TOKENS = re.compile(r"(?:\s*(?:<\|[^|<>\s]{1,40}\|>|<s>|<bos>|\[BOS\]))*\s*")
_MAX_LEADING = 256


@dataclass(frozen=True)
class EvalItem:
    """One completion to judge, validated: what a request body turns into."""

    problem: Problem
    completion: str
    reward: RewardFunction
    options: EvalOptions


@dataclass(frozen=True)
class Unscorable:
    """A sample of a batch that cannot be judged (why: `reason`); it gets the reward's failure
    value and status "unscorable", while the batch's other samples are judged."""

    reason: str
    reward: RewardFunction
    problem: Problem | None = None


class RequestParser:
    """Validates request bodies against the service's problems and defaults (BadRequest says
    what is wrong)."""

    def __init__(self, catalog: ProblemCatalog, default_reward: RewardFunction, default_options: EvalOptions):
        self.catalog, self.default_reward, self.default_options = catalog, default_reward, default_options

    def evaluate(self, body) -> EvalItem:
        """A POST /v1/evaluate body."""
        _require_object(body)
        unknown = sorted(set(body) - set(EVALUATE_FIELDS))
        if unknown:
            raise BadRequest(f"unknown field(s) {unknown}: the fields are {', '.join(EVALUATE_FIELDS)}")
        for name in ("problem", "completion"):
            if name not in body:
                raise BadRequest(f'missing field "{name}" (required: problem, completion)')
        return EvalItem(self.problem(body["problem"]), _string(body, "completion", "completion"),
                        self.reward(body.get("reward")), self.options(body.get("options")))

    def openrlhf(self, body) -> list[EvalItem | Unscorable]:
        """An OpenRLHF remote reward request: {"query": [...], "prompts": [...], "labels": [...]},
        optionally "responses" (each sample's response alone). Each label names the problem; the
        completion is the response alone, never the prompt: the given response, else the query
        after its prompt (see `response_part`). A sample whose response cannot be told from its
        prompt with certainty, or whose label names no problem, is `Unscorable` (one sample's
        failure, not the request's). Other fields OpenRLHF may add are ignored."""
        _require_object(body)
        queries, labels = _string_list(body, "query", required=True), _string_list(body, "labels", required=True)
        prompts = _string_list(body, "prompts", required=False)
        responses = _string_list(body, "responses", required=False)
        counts = {"query": len(queries), "labels": len(labels)}
        counts.update({name: len(v) for name, v in (("prompts", prompts), ("responses", responses)) if v is not None})
        if len(set(counts.values())) > 1:
            raise BadRequest(f"{', '.join(f'{name!r}' for name in counts)} must have one entry per sample (got "
                             f"{', '.join(str(n) for n in counts.values())})")
        reward, options = self.reward(body.get("reward")), self.options(body.get("options"))
        items: list[EvalItem | Unscorable] = []
        for index, (query, label) in enumerate(zip(queries, labels)):
            try:
                problem = self._labelled_problem(index, label)
            except BadRequest as exc:
                items.append(Unscorable(exc.message, reward))
                continue
            if responses is not None:
                items.append(EvalItem(problem, _without_trailing_special_tokens(responses[index]), reward, options))
            elif prompts is None:
                items.append(Unscorable('no "prompts" (or "responses") in the request: the response cannot be '
                                        "told from the prompt, so nothing is judged", reward, problem))
            elif (response := response_part(query, prompts[index])) is not None:
                items.append(EvalItem(problem, response, reward, options))
            else:
                items.append(Unscorable(
                    f"samples[{index}]: the query does not start with its prompt (a prompt truncated from the left, "
                    "or decoded differently): the response cannot be told from the prompt, so nothing is judged",
                    reward, problem))
        return items

    def problem(self, spec) -> Problem:
        """A request's problem: {"id": ...}, {"source": ..., "name": optional}, or a string (a
        label): a reference program when it has a line break, an id otherwise."""
        if isinstance(spec, str):
            spec = {"source": spec} if "\n" in spec else {"id": spec}
        if not isinstance(spec, dict):
            raise BadRequest(f'"problem" must be an object ({{"id": ...}} or {{"source": ...}}) or a string, '
                             f"not {json_type(spec)}")
        unknown = set(spec) - {"id", "source", "name"}
        if unknown or ("id" in spec) == ("source" in spec):
            raise BadRequest('"problem" needs exactly one of "id" (a problem of the loaded set) or "source" '
                             f'(a reference program){f"; unknown field(s): {sorted(unknown)}" if unknown else ""}')
        if "id" in spec:
            return self.catalog.get(_string(spec, "id", "problem.id"))
        source = _string(spec, "source", "problem.source")
        name = _string(spec, "name", "problem.name") if "name" in spec else None
        try:
            return problem_from_source(source, path="<request>", name=name or "inline")
        except ProblemError as exc:
            raise BadRequest(f"problem.source is not a usable reference program: {exc.cause}") from None

    def reward(self, spec) -> RewardFunction:
        if spec is None:
            return self.default_reward
        if not isinstance(spec, str):
            raise BadRequest('"reward" must be a spec string such as "speedup" or "cuda_l1:k=3", '
                             f"not {json_type(spec)}")
        _check_text(spec, "reward", short=True)
        try:
            return _reward_for(spec)
        except RewardError as exc:
            raise BadRequest(f"reward: {exc}") from None

    def options(self, overrides) -> EvalOptions:
        if overrides is None:
            return self.default_options
        if not isinstance(overrides, dict):
            raise BadRequest(f'"options" must be an object, not {json_type(overrides)}')
        refused = sorted(set(overrides) - set(REQUEST_OPTIONS))
        if refused:
            raise BadRequest(f"options {refused} cannot be set per request (the operator sets them with "
                             f"`kernelopt serve`); per-request options: {', '.join(REQUEST_OPTIONS)}")
        for name, value in overrides.items():
            _check_option_number(name, value)
        try:
            return EvalOptions(**{**self.default_options.model_dump(), **overrides})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise BadRequest(f"options: {problems}") from None

    def _labelled_problem(self, index: int, label: str) -> Problem:
        try:
            return self.problem(label)
        except BadRequest as exc:
            raise BadRequest(f"labels[{index}]: {exc.message}") from None


@functools.lru_cache(maxsize=256)  # trainers send the same few specs; bounded, since clients choose them
def _reward_for(spec: str) -> RewardFunction:
    return make_reward(spec)


def response_part(query: str, prompt: str) -> str | None:
    """The model's response in an OpenRLHF query (prompt + response, decoded with special
    tokens), without trailing special tokens; None when the query does not start with the whole
    prompt (special tokens such as a BOS aside). Then the response cannot be located with
    certainty: a prompt cut from the left (OpenRLHF truncates long prompts that way) leaves a
    query whose every part may be prompt text, and a program in the prompt must never be
    judged as the answer. An empty prompt says that the query is all response."""
    at = query.find(prompt, 0, _MAX_LEADING + len(prompt)) if prompt else 0
    if at < 0 or not _LEADING_SPECIAL_TOKENS.fullmatch(query[:at]):
        return None
    return _without_trailing_special_tokens(query[at + len(prompt):])


def _without_trailing_special_tokens(text: str) -> str:
    """`text` less the special tokens it ends with and the whitespace around them (unchanged when
    it ends with none)."""
    run = _TRAILING_SPECIAL_TOKENS_REVERSED.match(text[::-1])
    return text[:len(text) - run.end()] if run else text


def _check_option_number(name: str, value) -> None:
    """Numbers in options are finite (a tolerance of 1e999 would pass anything), and the
    tolerances lie in TOLERANCE_RANGES."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return  # pydantic says what is wrong with a non-number
    if not math.isfinite(value):
        raise BadRequest(f"options.{name} must be a finite number, not {value!r}")
    if name in TOLERANCE_RANGES:
        low, high = TOLERANCE_RANGES[name]
        if not low <= value <= high or (name == "max_rel_error" and value == 0):
            raise BadRequest(f"options.{name} must be between {low:g} and {high:g}"
                             f"{' (above 0)' if name == 'max_rel_error' else ''}, not {value!r}")


def _check_text(value: str, label: str, short: bool = False) -> str:
    """`value` when it is text a client may send in field `label`: within its size limit, no
    lone surrogate (they cannot be written back as UTF-8), and for short fields no control
    character."""
    limit = TEXT_LIMITS[label.split("[")[0]]
    if len(value) > limit:
        raise BadRequest(f'"{label}" is too long ({len(value)} characters; at most {limit})')
    if _LONE_SURROGATE.search(value):
        raise BadRequest(f'"{label}" holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text')
    if short and not value.isprintable():
        raise BadRequest(f'"{label}" must be printable text (no NUL or other control characters)')
    return value


def json_type(value) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _require_object(body) -> None:
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object, not {json_type(body)}")


def _string(body: dict, key: str, label: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise BadRequest(f'"{label}" must be a string, not {json_type(value)}')
    return _check_text(value, label, short=TEXT_LIMITS[label] <= 256)


@overload
def _string_list(body: dict, key: str, required: Literal[True]) -> list[str]: ...
@overload
def _string_list(body: dict, key: str, required: Literal[False]) -> list[str] | None: ...
def _string_list(body: dict, key: str, required: bool) -> list[str] | None:
    if key not in body:
        if required:
            raise BadRequest(f'missing field "{key}" (an OpenRLHF request has "query", "prompts" and "labels")')
        return None
    value = body[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f'"{key}" must be an array of strings')
    for index, text in enumerate(value):
        _check_text(text, f"{key}[{index}]")
    return value

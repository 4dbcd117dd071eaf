"""Request bodies into work: JSON from /v1/evaluate and /v1/openrlhf, checked field by field,
becomes `EvalItem`s. Parsing by hand (not by validating a pydantic model) is deliberate: each
mistake gets a message that says what to send instead, which a trainer's log shows verbatim."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from pydantic import ValidationError

from kernelopt.kernelbench import Problem, ProblemError, problem_from_source
from kernelopt.rewards.functions import RewardError, RewardFunction, make_reward
from kernelopt.rewards.service.catalog import ProblemCatalog
from kernelopt.rewards.service.errors import BadRequest
from kernelopt.sandbox.results import EvalOptions

# What decides where and how safely code runs (device, isolation, memory, builds, timeout), and
# the secret seeds, and the advisory profiling pass (--profile: its cost), stay the operator's; the rest says how strictly and how long a candidate is
# judged, which a request may choose. A new EvalOptions field is therefore per-request unless it
# is listed here.
OPERATOR_OPTIONS = frozenset({"device", "timeout", "memory_limit", "isolation", "image", "seed", "pin_timing",
                              "keep_scratch", "build_mode", "build_cache", "profile"})
REQUEST_OPTIONS = tuple(name for name in EvalOptions.model_fields if name not in OPERATOR_OPTIONS)
EVALUATE_FIELDS = ("problem", "completion", "reward", "options")
# Special tokens a decoded query may end with (OpenRLHF decodes with skip_special_tokens=False).
_TRAILING_SPECIAL_TOKENS = re.compile(r"(?:\s*(?:<\|[^|<>\s]{1,40}\|>|</s>|<eos>|<end_of_turn>))+\s*\Z")
# ... and may start with (a BOS the tokenizer added before the prompt).
_LEADING_SPECIAL_TOKENS = re.compile(r"(?:\s*(?:<\|[^|<>\s]{1,40}\|>|<s>|<bos>|\[BOS\]))*\s*")


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
                response, reason = _TRAILING_SPECIAL_TOKENS.sub("", responses[index]), None
            elif prompts is None:
                response, reason = None, ('no "prompts" (or "responses") in the request: the response cannot be '
                                          "told from the prompt, so nothing is judged")
            else:
                response = response_part(query, prompts[index])
                reason = None if response is not None else (
                    f"samples[{index}]: the query does not start with its prompt (a prompt truncated from the left, "
                    "or decoded differently): the response cannot be told from the prompt, so nothing is judged")
            items.append(EvalItem(problem, response, reward, options) if response is not None
                         else Unscorable(reason, reward, problem))
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
    at = query.find(prompt) if prompt else 0
    if at < 0 or not _LEADING_SPECIAL_TOKENS.fullmatch(query[:at]):
        return None
    return _TRAILING_SPECIAL_TOKENS.sub("", query[at + len(prompt):])


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
    return value


def _string_list(body: dict, key: str, required: bool) -> list[str] | None:
    if key not in body:
        if required:
            raise BadRequest(f'missing field "{key}" (an OpenRLHF request has "query", "prompts" and "labels")')
        return None
    value = body[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f'"{key}" must be an array of strings')
    return value

"""The API's shapes as pydantic models, for the OpenAPI document (/openapi.json, /docs). They
describe the contract; requests are still checked by `requests.py`, whose messages are more
useful than generic validation errors, and answers are built from `EvalResult` itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from kernelopt.rewards.service.requests import REQUEST_OPTIONS
from kernelopt.sandbox.results import EvalOptions, EvalResult, Status


def _may_be_left_out(description: str | None = None):
    """A field a client may leave out but not send as null (the parser refuses null there)."""
    return Field(None, description=description, json_schema_extra=lambda schema: schema.pop("default", None))


def _request_options_model() -> type[BaseModel]:
    # Built from EvalOptions' own fields, so types, bounds and descriptions cannot drift from
    # what the referee accepts; every one is optional (the service's setting when left out).
    fields: dict[str, Any] = {}
    for name in REQUEST_OPTIONS:
        info = EvalOptions.model_fields[name]
        checked: Any = info.annotation
        if info.metadata:  # with its bounds
            with_bounds = (info.annotation, *info.metadata)
            checked = Annotated[with_bounds]
        fields[name] = (checked, _may_be_left_out(info.description))
    return create_model("RequestOptions", __config__=ConfigDict(extra="forbid"),
                        __doc__="Per-request evaluation settings; anything left out is the service's.",
                        **fields)


if TYPE_CHECKING:  # built at run time; to a type checker, a model like any other
    class RequestOptions(BaseModel):
        pass
else:
    RequestOptions = _request_options_model()


class ProblemById(BaseModel):
    """A problem of the set the service loaded, as level/id ("1/3") or by its name."""

    model_config = ConfigDict(extra="forbid")
    id: str


class ProblemBySource(BaseModel):
    """A KernelBench-format reference program (Model, get_inputs, get_init_inputs)."""

    model_config = ConfigDict(extra="forbid")
    source: str
    name: str = _may_be_left_out()


ProblemSpec = ProblemById | ProblemBySource | str


class EvaluateRequest(BaseModel):
    """POST /v1/evaluate: one completion to judge. A string problem is a source when it has a
    line break, an id otherwise."""

    model_config = ConfigDict(extra="forbid")
    problem: ProblemSpec
    completion: str = Field(description="the model's whole answer, or bare code")
    reward: str | None = Field(None, description="a reward spec, e.g. log_speedup:clip=2; default: the service's")
    options: RequestOptions | None = None


class EvaluateAnswer(EvalResult):
    """The verdict (every field of `kernelopt eval --json`) and its reward."""

    status: Literal[Status, "format_error"]  # type: ignore[assignment]  # widened: an answer may be a format error
    reward: float = Field(description="the reward of this verdict under the spec")
    reward_spec: str = Field(description="the canonical spec, every parameter written out")
    speedup_interval: list[float] | None = Field(
        description="the speedup's 95 % interval [low, high]; null when not correct or not known")
    interval_too_wide: bool = Field(
        description="the reward's max_interval applied: the reward was discounted or withheld for noise")
    compile_speedup: float | None = Field(
        None, description="torch.compile's cached speedup on this problem (kernelopt serve --baselines), or null")


class OpenRLHFRequest(BaseModel):
    """OpenRLHF's remote reward request; each label names its sample's problem."""

    query: list[str] = Field(description="prompt + response, decoded")
    prompts: list[str] = _may_be_left_out(
        "each query's prompt; a query that does not start with it is unscorable (needed unless responses is sent)")
    responses: list[str] = _may_be_left_out("each sample's response alone (then the queries are not read)")
    labels: list[str] = Field(description="a problem id or reference source per sample")
    reward: str | None = None
    options: RequestOptions | None = None


class OpenRLHFAnswer(BaseModel):
    rewards: list[float]
    scores: list[float] = Field(description="1.0 for a correct verdict, else 0.0 (dynamic filtering)")
    extra_logs: dict[str, list[float]] = _may_be_left_out(
        "one number per sample and key (left out with ?extra_logs=0, for OpenRLHF 0.8 over HTTP)")
    statuses: list[str] = Field(description="each sample's verdict status, format_error or unscorable")
    intervals: list[list[float] | None] = Field(description="each speedup's 95 % interval, or null")
    flags: list[list[str]] = Field(description="each verdict's flags")
    messages: list[str | None] = Field(description="why a sample is unscorable, else null")


class Health(BaseModel):
    ok: bool = Field(description="false once the service is stopping")
    device: str
    queue_depth: int
    queue_size: int
    in_flight: int
    evaluators: int
    problems: int
    reward: str


class ProblemEntry(BaseModel):
    ids: list[str]
    name: str
    level: int | None
    problem_id: int | None
    hash: str


class ProblemListing(BaseModel):
    problems: list[ProblemEntry]


class ErrorAnswer(BaseModel):
    error: str = Field(description="what is wrong and what to do")
    code: str = Field(description="the kind: bad_request, not_found, overloaded, timeout, ...")
    retry_after: int | None = Field(None, description="seconds, with 429 and some 503 (also a Retry-After header)")


REQUEST_MODELS = (EvaluateRequest, OpenRLHFRequest)

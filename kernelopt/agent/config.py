"""A search's set-up: its settings (`OptimizeConfig`, JSON-able, stored with the run, so
`--resume RUN_ID` rebuilds exactly the same search; the API key is never stored: it comes from
the environment again) and, around them, everything one run is handed (`SearchRun`: the store,
the run's id, the problem, the device, the LLM client, the judge). A `SearchRun` is built once
where a run is opened (`kernelopt optimize`, a bench's problem, a Session, the MCP server) and
passed down to `search.run_search`, `search.build_pipeline` and `attempt.AttemptPipeline`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kernelopt.agent.budget import BudgetLimits
from kernelopt.agent.llm import LLMClient, LLMSettings, Price
from kernelopt.agent.store import RunStore
from kernelopt.kernelbench import Problem
from kernelopt.sandbox.results import Judge


@dataclass
class OptimizeConfig:
    problem_path: str
    model: str
    base_url: str
    api_key_env: str = "OPENAI_API_KEY"
    strategy: str = "refine"
    strategy_options: dict = field(default_factory=dict)   # window, width, depth, beam, ...
    limits: dict = field(default_factory=lambda: dataclasses.asdict(BudgetLimits()))
    device: str = "auto"
    backend: str | None = None                             # cuda | cupy | triton | cpp; None: auto (device)
    eval_options: dict = field(default_factory=dict)       # EvalOptions fields
    llm_options: dict = field(default_factory=dict)        # LLMSettings fields
    price: list[float] | None = None                       # [input, output] $ per 1M tokens
    use_cache: bool = False  # answers of earlier runs reused (--reuse-answers); a resumed run replays its own
    eval_workers: int = 1
    # Runs started over a problem set (`kernelopt bench`, `kernelopt generate`): where the
    # problem sits in it, {"level": L, "problem_id": N, "set": "<SET as given>"}; None otherwise.
    bench: dict | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> OptimizeConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def llm_settings(self, api_key: str | None) -> LLMSettings:
        price = Price(*self.price) if self.price else None
        return LLMSettings(model=self.model, base_url=self.base_url, api_key=api_key,
                           api_key_env=self.api_key_env, price=price, **self.llm_options)


@dataclass
class SearchRun:
    """One run as it is handed down: built once at the edge, never unpacked into loose values."""

    store: RunStore
    run_id: str
    config: OptimizeConfig
    problem: Problem                # as the run sees it (a resumed run: as stored)
    device: str                     # where the candidates are judged (the prompt describes it)
    client: LLMClient | None = None  # None: replayed calls only (a Session or the MCP server without one)
    api_key: str | None = None
    judge: Judge | None = None      # the caller's (a bench's warm one, local or on a cluster); None: the pipeline's own

    def llm_settings(self) -> LLMSettings:
        return self.config.llm_settings(self.api_key)

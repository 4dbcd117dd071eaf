"""`kernelopt optimize`: one search run from settings to summary.

Settings are one JSON-able `OptimizeConfig`, stored with the run, so `--resume RUN_ID` rebuilds
exactly the same search (the API key is never stored: it comes from the environment again).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernelopt.agent.budget import Budget, BudgetLimits
from kernelopt.agent.attempt import Attempt, Search
from kernelopt.agent.llm import LLMClient, LLMSettings, Price
from kernelopt.agent.prompting import PromptContext, backend_for, device_description
from kernelopt.agent.store import RunStore, new_run_id
from kernelopt.agent.strategies import make_strategy
from kernelopt.kernelbench import Problem, problem_from_source
from kernelopt.sandbox import EvalOptions


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
    backend: str | None = None                             # cuda | cpp; default from the device
    eval_options: dict = field(default_factory=dict)       # EvalOptions fields
    llm_options: dict = field(default_factory=dict)        # LLMSettings fields
    price: list[float] | None = None                       # [input, output] $ per 1M tokens
    use_cache: bool = True
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
class RunOutcome:
    run_id: str
    summary: dict
    attempts: list[Attempt]


def start_run(store: RunStore, config: OptimizeConfig, problem: Problem) -> str:
    run_id = new_run_id()
    store.create_run(run_id, problem, config.model, config.strategy, config.to_json())
    return run_id


def stored_problem(run: dict) -> Problem:
    """The problem exactly as the run saw it (the file may have changed since)."""
    return problem_from_source(run["problem_source"], path=run["problem_path"] or "<memory>")


def run_search(*, store: RunStore, run_id: str, config: OptimizeConfig, problem: Problem,
               client: LLMClient | None, api_key: str | None, device: str, out_dir: Path,
               on_event: Callable[[str, Attempt], None] | None = None,
               evaluator=None) -> RunOutcome:
    """Runs (or replays and continues) the search; always leaves the run's status and summary
    in the store, whatever stops it."""
    settings = config.llm_settings(api_key)
    budget = Budget(BudgetLimits(**config.limits))
    eval_options = EvalOptions(device=device, **config.eval_options)
    backend = config.backend or backend_for(device)
    prompts = PromptContext(reference_source=problem.source, problem_name=problem.name,
                            backend=backend, device_desc=device_description(device))
    extra = {"evaluator": evaluator} if evaluator else {}
    search = Search(run_id=run_id, problem=problem, store=store, client=client, settings=settings,
                    budget=budget, eval_options=eval_options, prompts=prompts,
                    use_cache=config.use_cache, eval_workers=config.eval_workers,
                    on_event=on_event, **extra)
    strategy = make_strategy(config.strategy, **config.strategy_options)
    started = time.monotonic()
    status, error = "finished", None
    try:
        strategy.run(search)
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user"
        budget.stop(error)
        raise
    except Exception as exc:  # a bug or a surprise: the run did not finish, and can be resumed
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        budget.stop(error)
        raise
    finally:
        search.close()
        if search.fatal is not None:
            status, error = "failed", str(search.fatal)
        summary = summarize(search, run_id, config, problem, out_dir, time.monotonic() - started,
                            stop_reason=error or budget.stop_reason() or "strategy finished")
        summary["status"] = status
        store.set_run_status(run_id, status, summary, error)
    return RunOutcome(run_id, summary, search.attempts)


def summarize(search: Search, run_id: str, config: OptimizeConfig, problem: Problem,
              out_dir: Path, wall_s: float, stop_reason: str) -> dict:
    best = search.best()
    best_info = None
    if best is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "best.py"
        path.write_text(best.code, encoding="utf-8")
        r = best.result
        best_info = {"status": r.status, "speedup": r.speedup, "path": str(path),
                     "candidate_id": best.candidate_id, "attempt": best.index,
                     "reference_ms": r.reference_ms, "candidate_ms": r.candidate_ms,
                     "optimization_kinds": r.optimization_kinds, "flags": r.flags}
    calls = search.store.calls(run_id)
    statuses: dict[str, int] = {}
    for a in search.attempts:
        statuses[a.status] = statuses.get(a.status, 0) + 1
    return {
        "run_id": run_id,
        "problem": problem.name,
        "model": config.model,
        "strategy": config.strategy,
        "best": best_info,
        "llm_calls": len(calls),
        "llm_calls_failed": sum(1 for c in calls if c["error"]),
        "candidates": sum(1 for a in search.attempts if a.code is not None),
        "evaluations": len(search.store.evaluations(run_id)),
        "attempts": len(search.attempts),
        "statuses": statuses,
        "tokens": {"prompt": sum(c["prompt_tokens"] or 0 for c in calls),
                   "completion": sum(c["completion_tokens"] or 0 for c in calls)},
        "cost": round(sum(c["cost"] or 0.0 for c in calls), 6),
        "stop_reason": stop_reason,
        "wall_s": round(wall_s, 2),
        "store": str(search.store.path),
        "out": str(out_dir),
    }


def bundled_candidates(problem_path: str) -> list[Path]:
    """Candidates shipped for a bundled example: examples/candidates/<problem stem>/*.py."""
    path = Path(problem_path).resolve()
    folder = path.parent.parent / "candidates" / path.stem
    return sorted(folder.glob("*.py")) if folder.is_dir() else []


def save_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

"""One search run, from settings to summary, and the search loop itself (`search_loop`).

`run_search` builds the run's attempt pipeline (attempt.py) and strategy (strategies.py), runs
`search_loop` until the strategy or the budget ends it, and leaves the run's status and its
`RunSummary` in the store, whatever stops it. The loop is the only place where attempts are
started and waited for: each round, the strategy names what to ask from the attempts finished so
far, and the loop starts those asks and waits.

A run's set-up travels as one `SearchRun` (config.py: the store, the run's id, its settings, the
problem, the device, the client, the judge); its settings are one JSON-able `OptimizeConfig`,
stored with the run, so `--resume RUN_ID` rebuilds exactly the same search (the API key is never
stored: it comes from the environment again).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kernelopt.agent.attempt import Attempt, AttemptPipeline
from kernelopt.agent.config import OptimizeConfig, SearchRun
from kernelopt.agent.budget import Budget, BudgetLimits
from kernelopt.agent.prompting import PromptContext
from kernelopt.agent.store import RunStore, calls_cost, new_run_id
from kernelopt.agent.strategies import Progress, Strategy, make_strategy, with_eval_defaults
from kernelopt.kernelbench.training import effective_pass
from kernelopt.kernelbench import Problem, problem_from_source
from kernelopt.kernelbench.backends import resolve_backend
from kernelopt.sandbox import EvalOptions
from kernelopt.sandbox.hardware import describe as describe_hardware

log = logging.getLogger(__name__)


@dataclass
class BestCandidate:
    """The run's best correct candidate (its code is in `path`)."""

    status: str
    speedup: float | None
    path: str
    candidate_id: int | None
    attempt: int
    reference_ms: float | None
    candidate_ms: float | None
    optimization_kinds: list[str]
    flags: list[str]
    speedup_precision: float | None = None  # the speedup's 95 % interval, relative half-width


@dataclass
class TokenCounts:
    prompt: int
    completion: int


@dataclass
class RunSummary:
    """What a run ended with: `kernelopt optimize --json` prints it, the store keeps it with the
    run (`runs show`), OUT/summary.json holds it. The JSON keys are the field names, in order."""

    run_id: str
    problem: str
    model: str
    strategy: str
    best: BestCandidate | None
    llm_calls: int
    llm_calls_failed: int
    candidates: int              # answers with a program (format errors are not candidates)
    evaluations: int             # distinct programs judged
    attempts: int
    statuses: dict[str, int]     # attempts by status
    tokens: TokenCounts
    cost: float | None  # US dollars; None: a model without a price (--price)
    stop_reason: str
    wall_s: float
    store: str
    out: str
    status: str                  # finished | failed | interrupted

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")


@dataclass
class RunOutcome:
    run_id: str
    summary: RunSummary
    attempts: list[Attempt]


def start_run(store: RunStore, config: OptimizeConfig, problem: Problem) -> str:
    run_id = new_run_id()
    store.create_run(run_id, problem, config.model, config.strategy, config.to_json())
    return run_id


def stored_problem(run: dict) -> Problem:
    """The problem exactly as the run saw it (the file may have changed since)."""
    return problem_from_source(run["problem_source"], path=run["problem_path"] or "<memory>")


def run_search(run: SearchRun, out_dir: Path,
               on_event: Callable[[str, Attempt], None] | None = None) -> RunOutcome:
    """Runs (or replays and continues) the search; always leaves the run's status and summary
    in the store, whatever stops it. `run.judge`: the caller's (a bench's warm one, on this
    machine or a Ray cluster, whose `hardware` the prompt then describes); default: the
    pipeline's own."""
    config, run_id = run.config, run.run_id
    budget = Budget(BudgetLimits(**config.limits))
    try:
        pipeline = build_pipeline(run, budget, on_event)
        strategy = make_strategy(config.strategy, **config.strategy_options)
    except KeyboardInterrupt:  # before the search began: nothing judged, the run is not left "running"
        run.store.set_run_status(run_id, "interrupted", None, "interrupted by the user")
        raise
    started = time.monotonic()
    status, error = "finished", None
    try:
        search_loop(strategy, pipeline)
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user"
        budget.stop(error)
        raise
    except Exception as exc:  # a bug or a surprise: the run did not finish, and can be resumed
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        budget.stop(error)
        raise
    finally:
        _close(pipeline, interrupted=status == "interrupted")
        if pipeline.fatal is not None:
            status, error = "failed", str(pipeline.fatal)
        summary = summarize(pipeline, run_id, config, run.problem, out_dir, time.monotonic() - started,
                            stop_reason=error or budget.stop_reason() or "strategy finished", status=status)
        run.store.set_run_status(run_id, status, summary.to_json(), error)
    return RunOutcome(run_id, summary, pipeline.attempts)


def _close(pipeline: AttemptPipeline, interrupted: bool) -> None:
    """Stop the pipeline. After an interrupt, a failure to clean up (workers killed under an
    evaluation in flight) must not replace the interrupt: the run is still saved as interrupted
    and the command still exits at once with its resume line."""
    try:
        pipeline.close(interrupted=interrupted)
    except Exception as exc:
        if not interrupted:
            raise
        log.warning("cleaning up after the interrupt: %s: %s", type(exc).__name__, exc)


def build_pipeline(run: SearchRun, budget: Budget, on_event=None) -> AttemptPipeline:
    """The run's attempt pipeline: what it judges with (the strategy's evaluation defaults) and
    the prompts' description of the problem, the backend and the device."""
    config, device = run.config, run.device
    eval_options = EvalOptions(device=device, **with_eval_defaults(config.strategy, config.eval_options))
    backend = resolve_backend(config.backend, device)  # BackendError (ValueError) when it cannot run there
    hardware = run.judge.hardware if run.judge is not None else describe_hardware(device)
    prompts = PromptContext(reference_source=run.problem.shown_source, problem_name=run.problem.name,
                            backend=backend, device_desc=hardware.summary, hardware=hardware.facts,
                            training_pass=effective_pass(eval_options.training_pass, run.problem.training_pass))
    return AttemptPipeline(run, budget=budget, eval_options=eval_options, prompts=prompts, on_event=on_event)


def search_loop(strategy: Strategy, pipeline: AttemptPipeline) -> None:
    """The search, round after round: the strategy names the asks of a round from the attempts
    finished so far (None: it has nothing more to ask); each ask is started as soon as it is
    built (the budget may refuse it); then the loop waits, for the whole round or, for a
    strategy with a window, until one attempt finishes. A round that starts no attempt (the
    budget refused all of it, or the strategy asked for none) ends the search; attempts still
    in flight finish before this returns."""
    in_flight: set[Future] = set()
    progress = Progress()
    while (asks := strategy.next_round(pipeline, progress)) is not None:
        started = refused = 0
        for ask in asks:
            future = (ask.start(pipeline) if ask.start is not None
                      else pipeline.attempt(ask.messages, parent=ask.parent, data=ask.data))
            if future is None:
                refused += 1
            else:
                started += 1
                in_flight.add(future)
        if not started:
            break
        if strategy.window is None:
            wait(in_flight)
            in_flight = set()
        else:
            _, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
        progress = Progress(round=progress.round + 1, refused=refused, in_flight=len(in_flight))
    wait(in_flight)


def summarize(pipeline: AttemptPipeline, run_id: str, config: OptimizeConfig, problem: Problem,
              out_dir: Path, wall_s: float, stop_reason: str, status: str) -> RunSummary:
    """The run's summary; the best candidate's code is written to OUT/best.py."""
    calls = pipeline.store.calls(run_id)
    statuses: dict[str, int] = {}
    for a in pipeline.attempts:
        statuses[a.status] = statuses.get(a.status, 0) + 1
    return RunSummary(
        run_id=run_id,
        problem=problem.name,
        model=config.model,
        strategy=config.strategy,
        best=write_best(pipeline.best(), out_dir),
        llm_calls=len(calls),
        llm_calls_failed=sum(1 for c in calls if c["error"]),
        candidates=sum(1 for a in pipeline.attempts if a.code is not None),
        evaluations=len(pipeline.store.evaluations(run_id)),
        attempts=len(pipeline.attempts),
        statuses=statuses,
        tokens=TokenCounts(prompt=sum(c["prompt_tokens"] or 0 for c in calls),
                           completion=sum(c["completion_tokens"] or 0 for c in calls)),
        cost=calls_cost(calls),
        stop_reason=stop_reason,
        wall_s=round(wall_s, 2),
        store=str(pipeline.store.path),
        out=str(out_dir),
        status=status,
    )


def write_best(best: Attempt | None, out_dir: Path) -> BestCandidate | None:
    if best is None:
        return None
    r, code = best.result, best.code
    if r is None or code is None:
        raise ValueError(f"attempt {best.index} was not judged: it cannot be the best candidate")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "best.py"
    path.write_text(code, encoding="utf-8")
    return BestCandidate(status=r.status, speedup=r.speedup, path=str(path), candidate_id=best.candidate_id,
                         attempt=best.index, reference_ms=r.reference_ms, candidate_ms=r.candidate_ms,
                         optimization_kinds=r.optimization_kinds, flags=list(r.flags),
                         speedup_precision=r.timing.speedup_precision if r.timing else None)

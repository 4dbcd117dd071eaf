"""The agent over a problem set: one stored `kernelopt optimize` run per problem, resumable.

One driver, `run_over_set`, with two front ends: `kernelopt bench` without --solutions (records
of kind "agent" in OUT/results.jsonl, KernelBench's metrics over them in OUT/summary.json) and
`kernelopt generate` (kernelopt/bench/generate.py: K scored samples per problem for datasets,
OUT/generate.jsonl). Per problem, in set order, problems handed out from one queue to the
devices (one problem at a time per device, `runner.run_on_devices`):

1. the reference's health is checked once (as rescoring does; the record stays in the log). A
   reference that fails or does not fit the device gets a `problem_error` record and no run;
2. the run is started in the run store (settings: the template, with the problem's place in the
   set in `OptimizeConfig.bench`) and its id written to OUT/runs.json *before* any LLM call;
3. `run_search` runs it with the per-problem budget, its judge (sandbox/results.Judge) being the
   one that checked the health: an Evaluator on this machine (the reference worker starts once
   per problem) or the cluster's `RemoteEvaluator`;
4. the problem's record is appended to the log: its kind's fields (from the run's summary and
   the store) plus `run_failed` and the error when the run stopped on an error.

On a Ray cluster (`SetJob.pool`, kernelopt/cluster), the searches run in the driver (their LLM
calls too), two problems per judging actor so that an actor judges while another search waits
on its LLM; every evaluation goes to an idle actor (the problem's warm one first), and the
driver alone writes the log, runs.json and the store.

Resume: a rerun with the same OUT skips every problem with a record, resumes a problem whose
run OUT/runs.json names (run_search replays it from the store: no finished LLM call or
evaluation is redone), and starts the others. A `run_failed` problem is resumed again on a
rerun (its new record replaces the old one: a later record with the same key wins). The
settings that shape the searches (model, strategy, its options) are kept in runs.json: a rerun
with other ones is refused rather than mixing two experiments in one OUT.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelopt.agent.llm import LLMClient
from kernelopt.agent.search import OptimizeConfig, RunSummary, SearchRun, run_search, start_run, stored_problem
from kernelopt.agent.store import RunStore, StoreError, calls_cost, total_cost
from kernelopt.bench.runner import (Progress, ResultLog, check_health_once, run_on_devices,
                                    write_summary)
from kernelopt.bench.summary import device_sections, summarize_results
from kernelopt.kernelbench import Problem, ProblemSet
from kernelopt.sandbox import EvalOptions, Evaluator, Judge

if TYPE_CHECKING:
    from kernelopt.cluster import JudgePool

RUN_FAILED = "run_failed"
PROBLEMS_PER_ACTOR = 2  # on a cluster: searches in flight per judging actor (one judged, one asking its LLM)
PROBLEM_ERROR = "problem_error"
# Health flags that leave nothing to optimize against: the reference itself cannot run here.
UNRUNNABLE = ("reference_fails", "does_not_fit")
# A run without a correct candidate is described by the verdict that got furthest.
FURTHEST_FIRST = ("incorrect", "rejected", "timeout", "runtime_error", "compile_error", "format_error",
                  "llm_error", "not_evaluated")


class SetRunError(ValueError):
    """OUT, the store and the settings do not fit together; the message says how to fix it."""


@dataclass
class SetRun:
    """A pass of the agent over a set as the command line sets it up, checked, built once
    (cli/agent_setup.agent_setup) and handed down to `bench_agent` or `generate`."""

    problem_set: ProblemSet
    template: OptimizeConfig       # every run's settings; problem_path, bench and device set per problem
    store: RunStore
    out: Path
    devices: list[str]
    api_key: str | None
    pool: JudgePool | None = None  # judge on a Ray cluster's actors


@dataclass
class SetJob:
    """One pass of the agent over a problem set: its set-up, and what its driver (bench_agent,
    generate) makes of each problem."""

    run: SetRun
    kind: str                      # "agent" or "generate": the records' kind and key prefix
    log_name: str                  # the records' file in OUT
    # A run's own fields for its record: (store, run_id, run summary) -> fields; the summary is
    # None when the run raised, and both are None for a problem that got no run.
    fields: Callable[[RunStore, str | None, RunSummary | None], dict]
    status: Callable[[RunSummary], str]  # a finished run's summary -> its record's status
    report: Callable[[str], None]


def run_over_set(job: SetJob) -> ResultLog:
    """Runs the agent on every problem of the set that has no record yet; returns the log."""
    _check_distinct(job.run.problem_set)
    job.run.out.mkdir(parents=True, exist_ok=True)
    log = ResultLog(job.run.out / job.log_name)
    runs = RunMap(job.run.out / "runs.json", job.run.template, job.run.store)
    pending = [p for p in job.run.problem_set if _pending(log, problem_key(job.kind, p))]
    runs.check_stored([problem_key(job.kind, p) for p in pending])
    parallel = job.run.pool.size * PROBLEMS_PER_ACTOR if job.run.pool is not None else len(job.run.devices)
    progress = Progress(len(job.run.problem_set), job.report, parallel=parallel)
    for problem in job.run.problem_set:
        key = problem_key(job.kind, problem)
        if not _pending(log, key):
            progress.step(problem_label(problem), log.records[key], None, note=_calls_note(log.records[key]))
    if job.run.pool is not None:
        from kernelopt.cluster import run_on_pool

        device = job.run.pool.agent_device
        run_on_pool(pending, job.run.pool, lambda problem: _solve(job, problem, device, log, runs, progress),
                    per_actor=PROBLEMS_PER_ACTOR)
    else:
        run_on_devices(pending, job.run.devices, lambda problem, device: _solve(job, problem, device, log, runs, progress))
    return log


def _check_distinct(problem_set: ProblemSet) -> None:
    """Records, health probes and metrics know a problem by (level, id): two problems of one
    level without an id would be taken for one."""
    seen: dict[tuple, Problem] = {}
    for problem in problem_set:
        other = seen.setdefault((problem.level, problem.problem_id), problem)
        if other is not problem:
            raise SetRunError(f"{other.path} and {problem.path} are both level {problem.level} problem "
                              f"{problem.problem_id}: name problem files {{id}}_{{Name}}.py (e.g. 7_Conv.py) so "
                              "each has an id of its own")


def problem_key(kind: str, problem: Problem) -> str:
    ident = problem.problem_id if problem.problem_id is not None else problem.name
    return f"{kind}/{problem.level}/{ident}"


def problem_label(problem: Problem) -> str:
    ident = f"problem {problem.problem_id} " if problem.problem_id is not None else ""
    return f"level {problem.level} {ident}({problem.name})"


def _pending(log: ResultLog, key: str) -> bool:
    return key not in log.records or log.records[key]["status"] == RUN_FAILED


def _solve(job: SetJob, problem: Problem, device: str, log: ResultLog, runs: RunMap, progress: Progress) -> None:
    """One problem: health, run (started or resumed), record."""
    started = time.monotonic()
    key = problem_key(job.kind, problem)
    run_id = runs.get(key)
    # A resumed run goes on with the problem as it saw it (the file may have changed since).
    config, searched = _resumed(job, run_id) if run_id else (_fresh(job, problem, device), problem)
    options = EvalOptions(device=device, **config.eval_options)
    judge: Judge = Evaluator(searched, options) if job.run.pool is None else job.run.pool.evaluator(searched, options)
    try:
        health = check_health_once(judge, problem, log, job.report)
        unrunnable = [d for d in health["details"] if d.split(":", 1)[0] in UNRUNNABLE]
        if unrunnable:
            record = {**_base(key, job.kind, problem, None), **job.fields(job.run.store, None, None),
                      "status": PROBLEM_ERROR, "error": "; ".join(unrunnable)}
        else:
            if run_id is None:
                run_id = start_run(job.run.store, config, searched)
                runs.set(key, run_id)
            record = _run(job, key, problem, searched, config, run_id, device, judge)
        record["device_model"] = judge.device_model
    finally:
        judge.close()
    log.add(record)
    progress.step(problem_label(problem), record, time.monotonic() - started, note=_calls_note(record))


def _calls_note(record: dict) -> str:
    calls = record.get("llm_calls", 0)
    return f" ({calls} LLM call{'' if calls == 1 else 's'})"


def _fresh(job: SetJob, problem: Problem, device: str) -> OptimizeConfig:
    place = {"level": problem.level, "problem_id": problem.problem_id, "set": job.run.problem_set.source}
    return dataclasses.replace(job.run.template, problem_path=str(problem.path or problem.name), bench=place,
                               device=device, limits=dict(job.run.template.limits))


def _resumed(job: SetJob, run_id: str) -> tuple[OptimizeConfig, Problem]:
    """A started run's own settings and problem (as it saw it); what a resume may change (the
    budget, the cache, the endpoint's URL) comes from this invocation, as in optimize --resume."""
    run = job.run.store.run(run_id)
    config = OptimizeConfig.from_json(run["config"])
    config.limits = dict(job.run.template.limits)
    config.use_cache, config.base_url = job.run.template.use_cache, job.run.template.base_url
    return config, stored_problem(run)


def _run(job: SetJob, key: str, problem: Problem, searched: Problem, config: OptimizeConfig, run_id: str,
         device: str, judge: Judge) -> dict:
    """The problem's record after its run (`problem`: as in the set; `searched`: as the run sees it)."""
    out_dir = job.run.out / "runs" / run_id
    base = _base(key, job.kind, problem, run_id)
    try:
        client = LLMClient(config.llm_settings(job.run.api_key))
        outcome = run_search(SearchRun(store=job.run.store, run_id=run_id, config=config, problem=searched,
                                       device=device, client=client, api_key=job.run.api_key, judge=judge), out_dir)
    except Exception as exc:  # noqa: BLE001 - any surprise fails this run only (marked failed in the store)
        return {**base, **job.fields(job.run.store, run_id, None), "status": RUN_FAILED,
                "error": f"{type(exc).__name__}: {exc}"}
    summary = outcome.summary
    summary.write(out_dir / "summary.json")
    record = {**base, **job.fields(job.run.store, run_id, summary), "status": job.status(summary)}
    if summary.status != "finished":   # stopped on an error (a key revoked, a broken sandbox)
        record.update(status=RUN_FAILED, error=summary.stop_reason)
    return record


def _base(key: str, kind: str, problem: Problem, run_id: str | None) -> dict:
    return {"key": key, "kind": kind, "level": problem.level, "problem_id": problem.problem_id,
            "name": problem.name, "run_id": run_id}


class RunMap:
    """OUT/runs.json: each problem's run id (written before the run's first call), the store
    they live in and the settings the set was started with. Thread-safe."""

    SHAPING = ("model", "strategy", "strategy_options")   # what makes two passes different experiments

    def __init__(self, path: Path, template: OptimizeConfig, store: RunStore):
        self.path, self.store = path, store
        self._lock = threading.Lock()
        settings = {name: getattr(template, name) for name in self.SHAPING}
        self.data: dict[str, Any] = {"settings": settings, "store": str(store.path), "runs": {}}
        if path.exists():
            try:
                recorded = json.loads(path.read_text(encoding="utf-8"))
                self.data["runs"] = dict(recorded["runs"])
                before = recorded["settings"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise SetRunError(f"{path} is damaged ({exc}); remove it (its runs start afresh) or use "
                                  "another --out") from exc
            if before != settings:
                raise SetRunError(f"{path.parent} holds a pass with other settings ({_describe(before)}) than "
                                  f"these ({_describe(settings)}): rerun with the same ones, or use another --out")
            self.data["store"] = recorded.get("store", self.data["store"])

    def get(self, key: str) -> str | None:
        with self._lock:
            return self.data["runs"].get(key)

    def set(self, key: str, run_id: str) -> None:
        with self._lock:
            self.data["runs"][key] = run_id
            partial = self.path.with_suffix(".json.partial")
            partial.write_text(json.dumps(self.data, indent=2) + "\n", encoding="utf-8")
            partial.replace(self.path)

    def check_stored(self, keys: list[str]) -> None:
        """Every run to resume must be in this store (an error before any work otherwise)."""
        for key in keys:
            run_id = self.get(key)
            if run_id is None:
                continue
            try:
                self.store.run(run_id)
            except StoreError:
                raise SetRunError(f"{self.path} names run {run_id} for {key}, which is not in the store "
                                  f"{self.store.path}; it was recorded in {self.data['store']}: pass "
                                  "--store with that file, or use another --out") from None


def _describe(settings: dict) -> str:
    options = json.dumps(settings.get("strategy_options") or {}, sort_keys=True)
    return f"model {settings.get('model')}, strategy {settings.get('strategy')} {options}"


def recorded_store(out: Path) -> str | None:
    """The store a pass in OUT used, if one was started there (the default for a rerun)."""
    try:
        return json.loads((out / "runs.json").read_text(encoding="utf-8")).get("store")
    except (OSError, ValueError, AttributeError):
        return None


# bench: the agent's records and summary ---------------------------------------------------------

def bench_agent(run: SetRun, report: Callable[[str], None]) -> dict:
    """`kernelopt bench` without --solutions: the agent on each problem; KernelBench's metrics
    over the problems' best correct candidates (OUT/results.jsonl, OUT/summary.json)."""
    problem_set, template, store, out, pool = run.problem_set, run.template, run.store, run.out, run.pool
    job = SetJob(run=run, kind="agent", log_name="results.jsonl", fields=agent_fields, status=agent_status,
                 report=report)
    log = run_over_set(job)
    records = [r for r in log.records.values() if r.get("kind") == "agent"]
    summary = summarize_results(problem_set, log.records.values())
    summary.update(device_sections(problem_set, log.records.values(), pool is not None and pool.spec.mix_devices))
    summary.update(n_problems_run=sum(1 for r in records if r["run_id"]),
                   statuses=dict(Counter(r["status"] for r in records)),
                   llm_calls=sum(r["llm_calls"] for r in records),
                   cost=total_cost([r["cost"] for r in records]),
                   results=str(log.path), store=str(store.path), model=template.model,
                   strategy=template.strategy)
    return write_summary(out, summary, "agent", problem_set)


def agent_fields(store: RunStore, run_id: str | None, summary: RunSummary | None) -> dict:
    """The record of a problem the agent worked on (the contract with `kernelopt report`)."""
    best = summary.best if summary else None
    calls = store.calls(run_id) if run_id else []
    return {"correct": best is not None, "speedup": best.speedup if best else None,
            "llm_calls": len(calls), "optimization_kinds": list(best.optimization_kinds) if best else [],
            "flags": list(best.flags) if best else [], "wall_s": summary.wall_s if summary else 0.0,
            "cost": calls_cost(calls),
            "best_by_call": best_by_call(store, run_id) if run_id else [],
            **best_verdict_parts(store, run_id, best.candidate_id if best else None)}


def best_verdict_parts(store: RunStore, run_id: str | None, candidate_id: int | None) -> dict:
    """Of the best candidate's stored verdict, what the report shows beside its speedup: its
    profile (--profile; refine, tree and evolve profile by default) and, for a problem with
    several input configurations, each one's verdict."""
    if run_id is None or candidate_id is None:
        return {"profile": None}
    for row in store.candidates_with_calls(run_id):
        if row["id"] == candidate_id and row.get("result"):
            verdict = json.loads(row["result"])
            return {"profile": verdict.get("profile"), **({"shapes": verdict["shapes"]} if verdict.get("shapes") else {})}
    return {"profile": None}


def agent_status(summary: RunSummary) -> str:
    """"correct" when the run found a correct candidate, else the verdict that got furthest."""
    if summary.best:
        return "correct"
    return next((s for s in FURTHEST_FIRST if summary.statuses.get(s)), "no_attempts")


def best_by_call(store: RunStore, run_id: str) -> list[list]:
    """[call number, best correct speedup after that call or None] for each LLM call of the run
    in the order they were recorded (critiques and failed calls included: they spend budget)."""
    verdict = {c["llm_call_id"]: c for c in store.candidates(run_id)}
    best, curve = None, []
    for number, call in enumerate(store.calls(run_id), start=1):
        candidate = verdict.get(call["id"])
        if candidate and candidate["status"] == "correct" and candidate["speedup"] is not None:
            best = max(best or 0.0, candidate["speedup"])
        curve.append([number, best])
    return curve

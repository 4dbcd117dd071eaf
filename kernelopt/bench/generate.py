"""`kernelopt generate`: K scored candidates per problem of a set, for datasets.

Each problem gets one stored run with the `samples` strategy (kernelopt/agent/strategies.py): K
independent first attempts, each refined T more turns with the referee's feedback on its own
chain only. Every attempt is judged and stored with its parent (the chain's previous answer)
and its strategy data `{"sample": k, "turn": t}`, so an export can rebuild the chains and turns.
The set is driven by agent_runs.run_over_set, as `kernelopt bench` drives the agent (resume
from OUT/runs.json and the store, health checks, devices, failing problems recorded and passed
over); OUT/generate.jsonl gets one line per problem: its run, its candidates counted by
verdict, and the best.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from kernelopt.agent.search import RunSummary
from kernelopt.agent.store import RunStore, calls_cost, total_cost
from kernelopt.bench.agent_runs import SetJob, SetRun, run_over_set


def calls_needed(samples: int, turns: int, critique: bool) -> int:
    """LLM calls for K chains of 1 + T turns (a critique is one more call per refinement)."""
    return samples * (1 + turns) + (samples * turns if critique else 0)


def generate(run: SetRun, report: Callable[[str], None]) -> dict:
    """Runs the samples strategy on every problem without a line in OUT/generate.jsonl; returns
    the summary over all of them (`run.pool`: judge on a Ray cluster's actors, kernelopt.cluster)."""
    problem_set, template, store = run.problem_set, run.template, run.store
    job = SetJob(run=run, kind="generate", log_name="generate.jsonl", fields=generate_fields,
                 status=lambda summary: "finished", report=report)
    log = run_over_set(job)
    records = [r for r in log.records.values() if r.get("kind") == "generate"]
    verdicts: Counter[str] = Counter()
    for record in records:
        verdicts.update(record["counts"])
    return {"problems": len(problem_set),
            "statuses": dict(Counter(r["status"] for r in records)),
            "candidates": sum(r["candidates"] for r in records),
            "scored": sum(r["scored"] for r in records),
            "counts": dict(verdicts),
            "problems_with_correct": sum(1 for r in records if r["correct"]),
            "llm_calls": sum(r["llm_calls"] for r in records),
            "cost": total_cost([r["cost"] for r in records]),
            "samples": template.strategy_options.get("samples"),
            "turns": template.strategy_options.get("turns"),
            "model": template.model, "results": str(log.path), "store": str(store.path)}


def generate_fields(store: RunStore, run_id: str | None, summary: RunSummary | None) -> dict:
    """A problem's line: its candidates counted by verdict (format_error: no program in the
    answer), failed LLM calls, and the best correct candidate."""
    candidates = store.candidates(run_id) if run_id else []
    calls = store.calls(run_id) if run_id else []
    counts = Counter(c["status"] or ("format_error" if c["format_error"] else "not_evaluated") for c in candidates)
    correct = [c for c in candidates if c["status"] == "correct" and c["speedup"] is not None]
    best = max(correct, key=lambda c: (c["speedup"], -c["id"])) if correct else None
    best_info = None if best is None else {
        "candidate_id": best["id"], "speedup": best["speedup"],
        "sample": best["strategy_data"].get("sample"), "turn": best["strategy_data"].get("turn")}
    return {"candidates": len(candidates), "scored": sum(1 for c in candidates if c["status"]),
            "counts": dict(counts), "llm_errors": sum(1 for c in calls if c["error"]),
            "correct": best is not None, "speedup": best["speedup"] if best else None, "best": best_info,
            "llm_calls": len(calls), "cost": calls_cost(calls)}

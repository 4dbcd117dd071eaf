"""`kernelopt runs list|show`: the optimization runs in the run store."""

from __future__ import annotations

import json
import textwrap

from kernelopt.cli.errors import EXIT_OK, UsageError
from kernelopt.cli.text import first_line, speedup_with_interval, summary_text


def add_command(commands) -> None:
    p = commands.add_parser("runs", help="list and inspect stored optimization runs")
    sub = p.add_subparsers(dest="runs_command", required=True)
    ls = sub.add_parser("list", help="one line per run")
    show = sub.add_parser("show", help="a run's settings, summary and candidates")
    show.add_argument("run_id", metavar="RUN_ID", help="the run's id (`runs list` shows them)")
    for q in (ls, show):
        q.add_argument("--store", default=None, metavar="PATH",
                       help="the run store (default $KERNELOPT_STORE, else kernelopt-runs/store.sqlite)")
        q.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    ls.set_defaults(handler=run_runs_list)
    show.set_defaults(handler=run_runs_show)


def run_runs_list(args) -> int:
    from kernelopt.cli.console import print_table
    from kernelopt.agent.store import RunStore, StoreError

    try:
        store = RunStore.open(args.store)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc
    runs = [run_row(r) for r in store.runs()]
    if args.json:
        print(json.dumps({"store": str(store.path), "runs": runs}))
        return EXIT_OK
    if not runs:
        print(f"no runs in {store.path}")
        return EXIT_OK
    best = [f"{r['best_speedup']:.3f}x" if r["best_speedup"] is not None else "-" for r in runs]
    width = max(len(r["run_id"]) for r in runs)
    header = f"{'run':{width}s}  {'status':11s} {'problem':24s} {'model':24s} {'strategy':9s} {'best':>13s}  LLM calls"
    lines = [header] + [f"{r['run_id']:{width}s}  {r['status']:11s} {r['problem']:24s} {r['model']:24s} "
                        f"{r['strategy']:9s} {b:>13s}  {r['llm_calls']}" for r, b in zip(runs, best)]
    rows = [(r["run_id"], r["status"], r["problem"], r["model"], r["strategy"], b, r["llm_calls"])
            for r, b in zip(runs, best)]
    print_table(("run", "status", "problem", "model", "strategy", "best", "LLM calls"), rows, lines,
                title=f"runs in {store.path}")
    return EXIT_OK


def run_row(run: dict) -> dict:
    summary = run["summary"] or {}
    best = summary.get("best") or {}
    return {"run_id": run["id"], "status": run["status"], "problem": run["problem_name"],
            "model": run["model"], "strategy": run["strategy"], "created": run["created"],
            "best_speedup": best.get("speedup"), "llm_calls": summary.get("llm_calls", 0)}


def run_runs_show(args) -> int:
    from kernelopt.agent.store import RunStore, StoreError

    try:
        store = RunStore.open(args.store)
        run = store.run(args.run_id)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc
    candidates = [{k: c[k] for k in ("id", "parent_id", "llm_call_id", "code_hash", "status", "speedup",
                                     "message", "format_error", "strategy_data")}
                  for c in store.candidates(args.run_id)]
    verdicts = candidate_verdicts(store, args.run_id)
    for c in candidates:
        verdict = verdicts.get(c["id"]) or {}
        c["profile"] = verdict.get("profile")
        c["timing"] = timing_of(verdict, c["speedup"])
    calls = [{k: c[k] for k in ("id", "purpose", "occurrence", "prompt_tokens", "completion_tokens",
                                "latency_s", "cost", "attempts", "source", "error")}
             for c in store.calls(args.run_id)]
    tools = store.tool_calls(args.run_id)   # --strategy agent and `kernelopt mcp`
    if args.json:
        print(json.dumps({"run": {k: v for k, v in run.items() if k != "problem_source"},
                          "candidates": candidates, "llm_calls": calls, "tool_calls": tools}))
        return EXIT_OK
    print(f"run {run['id']}: {run['status']}  problem {run['problem_name']} ({run['problem_path']})")
    print(f"model {run['model']}  strategy {run['strategy']}  limits {json.dumps(run['config'].get('limits'))}")
    if run["error"]:
        print(f"error: {run['error']}")
    if run["summary"]:
        print(summary_text(run["summary"]))
    print(f"\n{len(calls)} LLM calls, {len(candidates)} candidates:")
    for c in candidates:
        status = c["status"] or ("format_error" if c["format_error"] else "not evaluated")
        print(f"  #{c['id']:<4d} parent {str(c['parent_id'] or '-'):>4s}  {status:14s} {speedup_text(c)}")
        note = first_line(c["message"] or c["format_error"] or "", limit=10_000)  # the verdict's sentence, whole
        if note:
            print(textwrap.fill(note, width=100, initial_indent=" " * 8, subsequent_indent=" " * 8))
        if c["profile"]:
            print(textwrap.indent(profile_table(c["profile"]), " " * 8))
    if tools:
        print(f"\n{len(tools)} tool calls (conversation.turn  call  candidate  answer):")
        for t in tools:
            mark = "error " if t["is_error"] else ""
            print(f"  {t['conversation']}.{t['turn']:<3d} {t['name']:9s} #{str(t['candidate_id'] or '-'):<4s} "
                  f"{mark}{first_line(t['result'], 80)}")
    return EXIT_OK


def candidate_verdicts(store, run_id: str) -> dict[int, dict]:
    """Candidate id -> its stored verdict (the full EvalResult JSON), for the judged ones."""
    return {row["id"]: json.loads(row["result"]) for row in store.candidates_with_calls(run_id) if row.get("result")}


def timing_of(verdict: dict, speedup: float | None) -> dict | None:
    """A judged candidate's times and the speedup's 95 % interval, from its verdict."""
    timing = verdict.get("timing")
    if not timing:
        return None
    precision = timing.get("speedup_precision")
    interval = [speedup * (1 - precision), speedup * (1 + precision)] if speedup and precision is not None else None
    return {"reference_ms": timing.get("reference_ms"), "candidate_ms": timing.get("candidate_ms"),
            "speedup_precision": precision, "speedup_interval": interval, "wall_speedup": timing.get("wall_speedup"),
            "method": timing.get("method")}


def speedup_text(candidate: dict) -> str:
    """`1.234x +-5.0% (ref 1.20 ms, cand 0.97 ms)`, or '' for a candidate without a speedup."""
    speedup, timing = candidate["speedup"], candidate.get("timing") or {}
    if speedup is None:
        return ""
    text = speedup_with_interval(speedup, timing.get("speedup_precision"))
    if timing.get("reference_ms") is not None and timing.get("candidate_ms") is not None:
        text += f" (reference {timing['reference_ms']:.3g} ms, candidate {timing['candidate_ms']:.3g} ms)"
    return text


def profile_table(profile: dict) -> str:
    from kernelopt.sandbox.profiling import table
    from kernelopt.sandbox.results import Profile

    return table(Profile.model_validate(profile))

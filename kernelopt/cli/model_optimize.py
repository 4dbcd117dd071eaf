"""`kernelopt model optimize`: the search (as `kernelopt optimize` runs it: strategies, backends,
store) on each extracted hot spot, the LLM-call budget shared out by share of time, then the
best correct candidates composed back into the model and judged end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelopt.cli.errors import EXIT_OK, EXIT_RUN_FAILED, EnvironmentFailure, UsageError
from kernelopt.cli.model_shared import add_profile_options, compose_and_report, composition_text_for, load_and_profile
from kernelopt.cli.options import (
    add_budget_options,
    add_endpoint_options,
    add_llm_options,
    add_run_eval_options,
    add_strategy_options,
)


def add_optimize_command(sub) -> None:
    p = sub.add_parser("optimize", help="search on each hot spot, then compose the winners",
                       description="Extract the top N hot spots, run the search on each (the --budget of LLM "
                                   "calls shared out by share of time, at least one each), compose the best "
                                   "correct candidates into RUN/optimized.py and judge it end to end against "
                                   "MODEL.py.")
    add_profile_options(p, device=False)
    p.add_argument("--top", type=int, default=3, metavar="N", help="how many hot spots (default 3)")
    add_endpoint_options(p)
    add_strategy_options(p)
    add_budget_options(p, "budget (--budget: LLM calls for the whole model, shared out by share of time)")
    add_llm_options(p)
    add_run_eval_options(p)
    out = p.add_argument_group("records")
    out.add_argument("--store", default=None, metavar="PATH", help="SQLite run store (default: $KERNELOPT_STORE or kernelopt-runs/store.sqlite)")
    out.add_argument("--out", default=None, metavar="DIR", help="the run's directory: problems/, one folder per spot's run, optimized.py, report.json (default: next to the store, model-<name>/)")
    out.add_argument("--json", action="store_true", help="print the report as one JSON object on stdout")
    out.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=run_model_optimize)


def share_budget(total: int, shares: list[float]) -> list[int]:
    """`total` LLM calls split by share (largest remainders), at least one each."""
    weight = sum(shares) or 1.0
    exact = [total * s / weight for s in shares]
    counts = [max(1, int(e)) for e in exact]
    order = sorted(range(len(shares)), key=lambda i: -(exact[i] - int(exact[i])))
    for i in order:
        if sum(counts) >= total:
            break
        counts[i] += 1
    return counts


def run_model_optimize(args) -> int:
    from kernelopt.agent.search import run_search, start_run
    from kernelopt.agent.store import RunStore, StoreError
    from kernelopt.cli.agent_setup import checked_client, configured_endpoint, missing_endpoint, new_config
    from kernelopt.kernelbench import load_problem
    from kernelopt.kernelbench.backends import resolve_backend
    from kernelopt.model.compose import replacement_for
    from kernelopt.model.extract import extract_spots, write_extracted
    from kernelopt.model.loading import record_constructors
    from kernelopt.sandbox import EvalOptions
    from kernelopt.sandbox.device import resolve_device
    from kernelopt.sandbox.process import SandboxError

    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    base_url = configured_endpoint(args)
    if base_url is None:
        return missing_endpoint(f"model optimize {args.model_file}")
    loaded, profile = load_and_profile(args)
    try:
        store = RunStore.open(args.store)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc
    out = Path(args.out) if args.out else store.path.parent / f"model-{loaded.problem.name}"
    items = [i for i in extract_spots(loaded, profile.spots, args.top)]
    write_extracted(items, out / "problems", args.model_file, profile.to_json())
    extracted = [i for i in items if i.file]
    if not extracted:
        raise UsageError("none of the top hot spots could be extracted: "
                         + "; ".join(f"{i.path}: {i.reason}" for i in items))
    total = args.budget if args.budget is not None else 10
    budgets = share_budget(total, [i.share for i in extracted])
    constructors = record_constructors(loaded)
    replacements, alone, runs, status = [], {}, [], "finished"
    for item, calls in zip(extracted, budgets):
        problem_path = out / "problems" / item.file
        try:
            config = new_config(args, base_url, str(problem_path), args.strategy)
            config.limits["llm_calls"] = calls
            device = resolve_device(config.device)
            config.backend = resolve_backend(config.backend, device)
            client, api_key = checked_client(config)
        except ValueError as exc:
            raise UsageError(f"invalid option: {exc}") from exc
        problem = load_problem(problem_path)
        run_id = start_run(store, config, problem)
        if not args.quiet:
            print(f"{item.path} ({item.share:.1%}): run {run_id}, {calls} LLM calls", file=sys.stderr, flush=True)
        try:
            outcome = run_search(store=store, run_id=run_id, config=config, problem=problem, client=client,
                                 api_key=api_key, device=device, out_dir=out / run_id)
        except SandboxError as exc:
            raise EnvironmentFailure(str(exc)) from exc
        summary = outcome.summary
        summary.write(out / run_id / "summary.json")
        if summary.status != "finished":
            status = summary.status
        best = summary.best
        runs.append({"module": item.path, "run_id": run_id, "llm_calls": calls,
                     "best_speedup": best.speedup if best else None})
        if best is not None:
            code = Path(best.path).read_text(encoding="utf-8")
            replacements.append(replacement_for(loaded, constructors, item.path, code, f"run {run_id}"))
            alone[item.path] = (best.speedup, f"{best.status} (best of run {run_id})")
    # the composition is judged with the runs' settings, without their advisory profiling pass
    options = EvalOptions(device=device, **{k: v for k, v in config.eval_options.items() if k != "profile"})
    report = compose_and_report(loaded, profile, replacements, options, out / "optimized.py", alone=alone)
    report.update(runs=runs, not_extracted=[{"module": i.path, "reason": i.reason} for i in items if not i.file],
                  status=status, out=str(out))
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report) if args.json else composition_text_for(report))
    return EXIT_OK if status == "finished" else EXIT_RUN_FAILED

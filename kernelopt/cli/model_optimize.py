"""`kernelopt model optimize`: the search (as `kernelopt optimize` runs it: strategies, backends,
store) on each extracted hot spot, the LLM-call budget shared out by share of time, then the
best correct candidates composed back into the model and judged end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelopt.cli.agent_setup import add_output_flags, add_search_options, checked_run, configured_endpoint
from kernelopt.cli.agent_setup import missing_endpoint, new_config, stored_run, usage_errors
from kernelopt.cli.errors import EXIT_OK, EXIT_RUN_FAILED, EnvironmentFailure, UsageError
from kernelopt.cli.model_shared import add_profile_options, compose_and_report, composition_text_for, load_and_profile
from kernelopt.cli.model_shared import profiled_pass


def add_optimize_command(sub) -> None:
    p = sub.add_parser("optimize", help="search on each hot spot, then compose the winners",
                       description="Extract the top N hot spots, run the search on each (the --budget of LLM "
                                   "calls shared out by share of time, at least one each), compose the best "
                                   "correct candidates into RUN/optimized.py and judge it end to end against "
                                   "MODEL.py.")
    add_profile_options(p, device=False)
    p.add_argument("--top", type=int, default=3, metavar="N", help="how many hot spots (default 3)")
    out = add_search_options(p, "budget (--budget: LLM calls for the whole model, shared out by share of time)")
    out.add_argument("--out", default=None, metavar="DIR", help="the run's directory: problems/, one folder per spot's run, optimized.py, report.json (default: next to the store, model-<name>/)")
    out.add_argument("--resume", action="store_true",
                     help="continue the run in --out DIR (its plan.json): unfinished spots' searches resume, "
                          "finished ones are kept unless --budget grew; then compose again")
    add_output_flags(out, "print the report as one JSON object on stdout")
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
    from kernelopt.agent.store import RunStore
    from kernelopt.model.compose import replacement_for
    from kernelopt.model.loading import record_constructors
    from kernelopt.sandbox import EvalOptions

    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    base_url = None
    if not args.resume:
        base_url = configured_endpoint(args)
        if base_url is None:
            return missing_endpoint(f"model optimize {args.model_file}", getattr(args, "json", False))
    elif not args.out:
        raise UsageError("--resume continues the run in --out DIR: give its --out")
    loaded, profile = load_and_profile(args)
    out = Path(args.out) if args.out else None
    plan = read_plan(out) if args.resume and out is not None else None
    with usage_errors():
        store = RunStore.open(args.store or (plan["store"] if plan else None))
    out = out or store.path.parent / f"model-{loaded.problem.name}"
    if plan is None:
        plan = new_plan(args, loaded, profile, store, out)
    elif args.budget is not None:   # a new budget for the whole model, shared out again
        for spot, calls in zip(plan["spots"], share_budget(args.budget, [s["share"] for s in plan["spots"]])):
            spot["llm_calls"] = calls
    constructors = record_constructors(loaded)
    replacements, alone, runs, status = [], {}, [], "finished"
    settings = None
    for spot in plan["spots"]:
        summary, settings = search_spot(args, spot, plan, store, out, base_url)
        if summary["status"] != "finished":
            status = summary["status"]
        best = summary["best"]
        runs.append({"module": spot["module"], "run_id": spot["run_id"], "llm_calls": spot["llm_calls"],
                     "best_speedup": best["speedup"] if best else None, "status": summary["status"]})
        if best is not None:
            code = Path(best["path"]).read_text(encoding="utf-8")
            replacements.append(replacement_for(loaded, constructors, spot["module"], code, f"run {spot['run_id']}"))
            alone[spot["module"]] = (best["speedup"], f"{best['status']} (best of run {spot['run_id']})")
    if settings is None:
        raise UsageError(f"{args.model_file}: no hot spot to optimize (see `kernelopt model extract` for why)")
    device, eval_options = settings
    # the composition is judged with the runs' settings, without their advisory profiling pass
    options = EvalOptions(device=device, **{k: v for k, v in eval_options.items() if k != "profile"})
    report = compose_and_report(loaded, profile, replacements, options, out / "optimized.py", alone=alone)
    report.update(runs=runs, not_extracted=plan["not_extracted"], status=status, out=str(out))
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report) if args.json else composition_text_for(report))
    return EXIT_OK if status == "finished" else EXIT_RUN_FAILED


def new_plan(args, loaded, profile, store, out: Path) -> dict:
    """Extracts the top spots into OUT/problems and writes OUT/plan.json: each spot's problem,
    share and LLM calls (its run is added when it starts), so that --resume finds them."""
    from kernelopt.model.extract import extract_spots, write_extracted

    items = extract_spots(loaded, profile.spots, args.top, training_pass=profiled_pass(args, loaded.problem))
    write_extracted(items, out / "problems", args.model_file, profile.to_json())
    extracted = [i for i in items if i.file]
    if not extracted:
        raise UsageError("none of the top hot spots could be extracted: "
                         + "; ".join(f"{i.path}: {i.reason}" for i in items))
    budgets = share_budget(args.budget if args.budget is not None else 10, [i.share for i in extracted])
    plan = {"model": str(args.model_file), "store": str(store.path),
            "spots": [{"module": i.path, "share": i.share, "file": i.file, "llm_calls": calls, "run_id": None}
                      for i, calls in zip(extracted, budgets)],
            "not_extracted": [{"module": i.path, "reason": i.reason} for i in items if not i.file]}
    write_plan(out, plan)
    return plan


def read_plan(out: Path) -> dict:
    path = out / "plan.json"
    if not path.is_file():
        raise UsageError(f"--resume: {path} not found (give the --out of the `kernelopt model optimize` run)")
    return json.loads(path.read_text(encoding="utf-8"))


def write_plan(out: Path, plan: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")


def search_spot(args, spot: dict, plan: dict, store, out: Path, base_url: str | None) -> tuple[dict, tuple]:
    """The search on one spot's problem, started or continued (a finished run whose budget did
    not grow is taken as it is); (its summary as JSON, (device, eval options))."""
    from kernelopt.agent.search import SearchRun, run_search, start_run
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox.device import resolve_device
    from kernelopt.sandbox.process import SandboxError

    with usage_errors():
        if spot["run_id"]:
            run, config, problem = stored_run(store, spot["run_id"])
            grew = spot["llm_calls"] > config.limits.get("llm_calls", 0)
            if run["status"] == "finished" and not grew and run["summary"]:
                return run["summary"], (resolve_device(config.device), config.eval_options)
            config.limits["llm_calls"] = spot["llm_calls"]
            if args.base_url:
                config.base_url = args.base_url
        else:
            # a spot a resumed run had not reached: its search starts now, on the endpoint configured now
            endpoint = base_url or configured_endpoint(args)
            if endpoint is None:
                raise UsageError(f"the search on {spot['module']} has not started yet: give the endpoint "
                                 "(--base-url, or an API key) to resume it")
            config = new_config(args, endpoint, str(out / "problems" / spot["file"]), args.strategy)
            config.limits["llm_calls"] = spot["llm_calls"]
            problem = load_problem(out / "problems" / spot["file"])
        device, client, api_key = checked_run(config, new=not spot["run_id"])
    if not spot["run_id"]:
        spot["run_id"] = start_run(store, config, problem)
        write_plan(out, plan)
    if not args.quiet:
        print(f"{spot['module']} ({spot['share']:.1%}): run {spot['run_id']}, {spot['llm_calls']} LLM calls",
              file=sys.stderr, flush=True)
    try:
        run = SearchRun(store=store, run_id=spot["run_id"], config=config, problem=problem, device=device,
                        client=client, api_key=api_key)
        outcome = run_search(run, out / spot["run_id"])
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    outcome.summary.write(out / spot["run_id"] / "summary.json")
    return outcome.summary.to_json(), (device, config.eval_options)

"""`kernelopt optimize` and `kernelopt runs`: the search from the command line.

Exit codes: 0 when the run finished (whether or not it found a correct candidate: see `best`),
1 when it started but stopped on an error (it can be resumed), 2 for unusable input or an
unusable endpoint (nothing was started), 3 when the sandbox cannot run, 130 on Ctrl-C (resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kernelopt.cli.parser import EXIT_BAD_INPUT, EXIT_OK, EnvironmentFailure, UsageError
from kernelopt.agent.strategies import STRATEGIES

EXIT_RUN_FAILED = 1

NO_ENDPOINT_HELP = """\
No LLM endpoint is configured, so nothing will be optimized. Configure one:

  OpenAI (or any hosted OpenAI-compatible API: DeepSeek, OpenRouter, ...):
    export OPENAI_API_KEY=...            # or --api-key-env NAME for another variable
    export OPENAI_BASE_URL=https://...   # only for providers other than OpenAI
    kernelopt {command} --model MODEL

  a local vLLM or SGLang server (no key needed):
    vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --port 8000
    kernelopt {command} --base-url http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-7B-Instruct

  a local Ollama server (no key needed):
    ollama pull qwen2.5-coder:7b
    kernelopt {command} --base-url http://localhost:11434/v1 --model qwen2.5-coder:7b
"""


def add_commands(commands) -> None:
    add_optimize_command(commands)
    add_runs_command(commands)


def add_optimize_command(commands) -> None:
    p = commands.add_parser(
        "optimize", help="search for a faster kernel with an LLM",
        description="Ask an LLM for ModelNew candidates for PROBLEM.py, judge each with the referee, "
                    "and feed the verdicts back, within a budget. Every call, candidate and verdict "
                    "is stored; a killed run continues with --resume RUN_ID.")
    p.add_argument("problem", nargs="?", metavar="PROBLEM.py", help="KernelBench-format problem file")
    add_endpoint_options(p)
    add_strategy_options(p)
    add_budget_options(p, "budget (the search stops at the first one spent)")
    add_llm_options(p)
    add_eval_options(p)
    out = p.add_argument_group("records")
    out.add_argument("--store", default=None, metavar="PATH", help="SQLite run store (default: $KERNELOPT_STORE or kernelopt-runs/store.sqlite)")
    out.add_argument("--out", default=None, metavar="DIR", help="where best.py and summary.json go (default: next to the store, in RUN_ID/)")
    out.add_argument("--resume", default=None, metavar="RUN_ID", help="continue a run (its settings come from the store)")
    out.add_argument("--json", action="store_true", help="print exactly one JSON object (the summary) on stdout")
    out.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=run_optimize)


# The option groups below are shared by optimize, bench (the agent over a set) and generate;
# apply_overrides turns them into an OptimizeConfig.

def add_endpoint_options(p) -> None:
    p.add_argument("--model", default=os.environ.get("KERNELOPT_MODEL"),
                   help="model name at the endpoint (default: $KERNELOPT_MODEL)")
    p.add_argument("--base-url", default=None,
                   help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL, else OpenAI)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="environment variable holding the API key (default OPENAI_API_KEY)")


def add_strategy_options(p) -> None:
    p.add_argument("--strategy", choices=STRATEGIES, default="refine", help="search strategy (default refine)")
    search = p.add_argument_group("strategy options")
    search.add_argument("--window", type=int, default=None, help="best-of-n: samples in flight (default 4)")
    search.add_argument("--width", type=int, default=None, help="tree: children per expansion (default 2)")
    search.add_argument("--depth", type=int, default=None, help="tree: maximum depth (default 4)")
    search.add_argument("--beam", type=int, default=None, help="tree: nodes expanded per step (default 1)")
    search.add_argument("--population", type=int, default=None, help="evolve: children per generation (default 4)")
    search.add_argument("--exemplars", type=int, default=None, help="evolve: scored exemplars per prompt (default 3)")
    search.add_argument("--seed", type=int, default=None, help="evolve: RNG seed (default 0)")
    add_samples_options(search)
    search.add_argument("--critique", action="store_true", help="ask the LLM for a diagnosis before each refinement (one more call each)")


def add_samples_options(group, required: bool = False) -> None:
    """--samples K, --turns T: the samples strategy's K independent chains of 1 + T turns."""
    group.add_argument("--samples", type=int, default=None, required=required, metavar="K",
                       help="samples: independent first attempts" + ("" if required else " (default 4)"))
    group.add_argument("--turns", type=int, default=None, metavar="T",
                       help="samples: refinements of each, with its own feedback (default 0)")


def add_budget_options(p, title: str) -> None:
    budget = p.add_argument_group(title)
    budget.add_argument("--budget", type=int, default=None, metavar="N", help="LLM calls (default 8)")
    budget.add_argument("--max-tokens-total", type=int, default=None, metavar="N", help="prompt + completion tokens")
    budget.add_argument("--max-cost", type=float, default=None, metavar="USD",
                        help="dollars (needs --price or a price table entry for the model)")
    budget.add_argument("--max-evals", type=int, default=None, metavar="N", help="evaluations")
    budget.add_argument("--max-wall", type=float, default=None, metavar="S", help="wall-clock seconds")
    budget.add_argument("--target-speedup", type=float, default=None, metavar="X", help="stop once a correct candidate reaches X")


def add_llm_options(p) -> None:
    llm = p.add_argument_group("LLM requests")
    llm.add_argument("--temperature", type=float, default=None)
    llm.add_argument("--top-p", type=float, default=None)
    llm.add_argument("--max-tokens", type=int, default=None, help="completion tokens per call")
    llm.add_argument("--max-completion-tokens", type=int, default=None, help="for reasoning models")
    llm.add_argument("--reasoning-effort", default=None, help="for reasoning models: low, medium, high")
    llm.add_argument("--concurrency", type=int, default=None, help="LLM calls at once (default 4)")
    llm.add_argument("--llm-timeout", type=float, default=None, metavar="S", help="seconds per request (default 600)")
    llm.add_argument("--retries", type=int, default=None, metavar="N",
                     help="attempts per call on 429/5xx/timeouts (default 6)")
    llm.add_argument("--price", type=float, nargs=2, default=None, metavar=("IN", "OUT"),
                     help="dollars per million input and output tokens (for cost records and --max-cost)")
    llm.add_argument("--price-table", default=os.environ.get("KERNELOPT_PRICES"), metavar="FILE",
                     help='JSON {"model": [IN, OUT]} of prices per million tokens (default: $KERNELOPT_PRICES)')
    llm.add_argument("--no-cache", action="store_true", help="always ask the endpoint, even for a request answered before")


def add_eval_options(p, timeout_flags: tuple[str, ...] = ("--eval-timeout",)) -> None:
    """The referee's settings (defaults: EvalOptions'). `timeout_flags`: bench keeps its --timeout."""
    ev = p.add_argument_group("evaluation")
    ev.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    ev.add_argument("--backend", choices=["cuda", "cpp"], default=None, help="kernel language asked for (default: cuda on GPUs, cpp on CPU)")
    ev.add_argument(*timeout_flags, dest="eval_timeout", type=float, default=None, metavar="S",
                    help="seconds per evaluation (default 300)")
    ev.add_argument("--timing-budget", type=float, default=None, metavar="S", help="seconds of timing per evaluation (default 10)")
    ev.add_argument("--correctness-trials", type=int, default=None, metavar="N", help="input sets checked (default 5)")
    ev.add_argument("--isolation", "--sandbox", dest="isolation",
                    choices=["auto", "bubblewrap", "unshare", "none", "docker"], default=None,
                    help="sandbox backend, as for eval (default auto)")
    ev.add_argument("--image", default=None, help="the docker backend's sandbox image (default kernelopt-sandbox)")
    ev.add_argument("--build-mode", choices=["fast", "exact", "stock", "off"], default=None,
                    help="how candidates' extensions are built (default fast; see docs/builds.md)")


def add_runs_command(commands) -> None:
    p = commands.add_parser("runs", help="list and inspect stored optimization runs")
    sub = p.add_subparsers(dest="runs_command", required=True)
    ls = sub.add_parser("list", help="one line per run")
    show = sub.add_parser("show", help="a run's settings, summary and candidates")
    show.add_argument("run_id", metavar="RUN_ID")
    for q in (ls, show):
        q.add_argument("--store", default=None, metavar="PATH")
        q.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    ls.set_defaults(handler=run_runs_list)
    show.set_defaults(handler=run_runs_show)


# optimize ------------------------------------------------------------------------------------

def run_optimize(args) -> int:
    from kernelopt.agent.optimize import OptimizeConfig, run_search, start_run, stored_problem
    from kernelopt.agent.store import StoreError
    from kernelopt.kernelbench import ProblemError, load_problem
    from kernelopt.sandbox.referee import resolve_device

    store = open_store(args.store)
    try:
        if args.resume:
            run = store.run(args.resume)
            config = OptimizeConfig.from_json(run["config"])
            apply_overrides(config, args, resuming=True)
            problem, run_id = stored_problem(run), args.resume
        else:
            if not args.problem:
                raise UsageError("give a problem file (PROBLEM.py) or --resume RUN_ID")
            problem = load_problem(args.problem)
            base_url = configured_endpoint(args)
            if base_url is None:
                return explain_missing_endpoint(args)
            config = new_config(args, base_url, str(args.problem), args.strategy)
        device = resolve_device(config.device)
        client, api_key = checked_client(config)
    except (ProblemError, StoreError) as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(f"invalid option: {exc}") from exc

    if not args.resume:
        run_id = start_run(store, config, problem)
    out_dir = Path(args.out) if args.out else store.path.parent / run_id
    if not args.quiet:
        verb = "resuming" if args.resume else "run"
        print(f"{verb} {run_id}: {problem.name} with {config.model} ({config.strategy}) on {device}; "
              f"store {store.path}", file=sys.stderr)
    printer = ProgressPrinter(config, enabled=not args.quiet)
    from kernelopt.sandbox.process import SandboxError
    try:
        outcome = run_search(store=store, run_id=run_id, config=config, problem=problem, client=client,
                             api_key=api_key, device=device, out_dir=out_dir, on_event=printer)
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    summary = outcome.summary
    from kernelopt.agent.optimize import save_json
    save_json(out_dir / "summary.json", summary)
    if args.json:
        print(json.dumps(summary))
    else:
        print(summary_text(summary))
    return EXIT_OK if summary["status"] == "finished" else EXIT_RUN_FAILED


def open_store(path: str | None):
    from kernelopt.agent.store import RunStore, StoreError, default_store_path

    try:
        return RunStore(path or default_store_path())
    except StoreError as exc:
        raise UsageError(str(exc)) from exc


def configured_endpoint(args) -> str | None:
    """The endpoint's URL, or None when neither a URL nor an API key is configured anywhere."""
    from kernelopt.agent.llm import resolve_endpoint

    base_url, _, configured = resolve_endpoint(args.base_url, args.api_key_env)
    return base_url if configured else None


def missing_endpoint(command: str) -> int:
    """No endpoint: say how to configure one (exit 2). `command`: how the user's command starts."""
    print(NO_ENDPOINT_HELP.format(command=command), file=sys.stderr)
    return EXIT_BAD_INPUT


def new_config(args, base_url: str, problem_path: str, strategy: str, strategy_options: dict | None = None):
    """A new run's settings from the command line (strategy_options: instead of the options')."""
    from kernelopt.agent.optimize import OptimizeConfig

    if not args.model:
        raise UsageError(f"--model is required (the model's name at {base_url}), or set KERNELOPT_MODEL")
    config = OptimizeConfig(problem_path=problem_path, model=args.model, base_url=base_url,
                            api_key_env=args.api_key_env, strategy=strategy)
    apply_overrides(config, args, resuming=False, strategy_options=strategy_options)
    return config


def checked_client(config):
    """(LLMClient, API key) for the run's endpoint, checked before any work: an unreachable
    server, a rejected key or an unknown model is a usage error."""
    from kernelopt.agent.llm import LLMClient, LLMConfigError

    api_key = os.environ.get(config.api_key_env) or None
    try:
        client = LLMClient(config.llm_settings(api_key))
        client.check()
    except LLMConfigError as exc:
        raise UsageError(str(exc)) from exc
    return client, api_key


def apply_overrides(config, args, resuming: bool, strategy_options: dict | None = None) -> None:
    """Options given on the command line; on resume only the budget, the cache and the endpoint's
    URL may change (the search itself must replay identically)."""
    limits = {"llm_calls": args.budget, "tokens": args.max_tokens_total, "cost": args.max_cost,
              "evaluations": args.max_evals, "wall_seconds": args.max_wall,
              "target_speedup": args.target_speedup}
    config.limits.update({k: v for k, v in limits.items() if v is not None})
    if args.no_cache:
        config.use_cache = False
    if args.base_url:
        config.base_url = args.base_url
    if resuming:
        return
    config.price = list(args.price) if args.price else price_from_table(args.price_table, config.model)
    if args.max_cost is not None and not config.price:
        raise UsageError(f"--max-cost needs a price for {config.model}: --price IN OUT (dollars per "
                         "million tokens) or an entry in --price-table")
    config.device = args.device
    config.backend = args.backend
    if strategy_options is None:
        strategy_options = {"window": args.window, "width": args.width, "depth": args.depth, "beam": args.beam,
                            "population": args.population, "exemplars": args.exemplars, "seed": args.seed,
                            "samples": args.samples, "turns": args.turns, "critique": args.critique or None}
    config.strategy_options = {k: v for k, v in strategy_options.items() if v is not None}
    llm = {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens,
           "max_completion_tokens": args.max_completion_tokens,
           "reasoning_effort": args.reasoning_effort, "concurrency": args.concurrency,
           "timeout": args.llm_timeout, "max_attempts": args.retries}
    config.llm_options = {k: v for k, v in llm.items() if v is not None}
    ev = {"timeout": args.eval_timeout, "timing_budget": args.timing_budget,
          "correctness_trials": args.correctness_trials, "isolation": args.isolation,
          "image": args.image, "build_mode": args.build_mode}
    config.eval_options = {k: v for k, v in ev.items() if v is not None}
    for name, value in list(config.limits.items()) + list(config.strategy_options.items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise UsageError(f"{name} must not be negative")


def price_from_table(path: str | None, model: str) -> list[float] | None:
    from kernelopt.agent.llm import LLMConfigError, load_price_table

    if not path:
        return None
    try:
        price = load_price_table(path).get(model)
    except LLMConfigError as exc:
        raise UsageError(str(exc)) from exc
    return [price.input_per_mtok, price.output_per_mtok] if price else None


class ProgressPrinter:
    """One line per finished attempt on stderr: what it was, and the best so far."""

    def __init__(self, config, enabled: bool):
        self.enabled = enabled
        self.budget = config.limits.get("llm_calls")
        self.best: float | None = None

    def __call__(self, kind: str, attempt) -> None:
        if attempt.correct and (self.best is None or attempt.score > self.best):
            self.best = attempt.score
        if not self.enabled:
            return
        of = f"/{self.budget}" if self.budget else ""
        best = f"{self.best:.3f}x" if self.best is not None else "-"
        if attempt.correct:
            what = f"correct, speedup {attempt.score:.3f}x"
        else:
            detail = attempt.format_error or attempt.llm_error or attempt.eval_error or \
                (attempt.result.message if attempt.result else "")
            what = attempt.status + (f": {first_line(detail)}" if detail else "")
        dup = " (duplicate, judged once)" if attempt.duplicate else ""
        print(f"[attempt {attempt.index}{of} | best {best}] {what}{dup}", file=sys.stderr, flush=True)


def first_line(text: str, limit: int = 120) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit] + ("..." if len(line) > limit else "")


def summary_text(summary: dict) -> str:
    best = summary["best"]
    lines = [f"run {summary['run_id']} {summary['status']}: {summary['stop_reason']}"]
    if best:
        lines.append(f"best: attempt {best['attempt']}, speedup {best['speedup']:.3f}x "
                     f"({', '.join(best['optimization_kinds']) or 'kind unknown'}) -> {best['path']}")
    else:
        lines.append("best: no correct candidate")
    tokens = summary["tokens"]["prompt"] + summary["tokens"]["completion"]
    lines.append(f"{summary['llm_calls']} LLM calls ({summary['llm_calls_failed']} failed), "
                 f"{summary['candidates']} candidates, {summary['evaluations']} evaluations, "
                 f"{tokens} tokens, ${summary['cost']:.4f}, {summary['wall_s']:.0f} s")
    lines.append(f"details: kernelopt runs show {summary['run_id']} --store {summary['store']}")
    return "\n".join(lines)


def explain_missing_endpoint(args) -> int:
    """No endpoint: say how to configure one, and show the referee on bundled candidates."""
    from kernelopt.agent.optimize import bundled_candidates

    print(NO_ENDPOINT_HELP.format(command=f"optimize {args.problem}"), file=sys.stderr)
    candidates = bundled_candidates(args.problem)
    if candidates and not args.json:
        demo_referee(args, candidates)
    return EXIT_BAD_INPUT


def demo_referee(args, candidates: list[Path]) -> None:
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import EvalOptions, evaluate

    problem = load_problem(args.problem)
    print(f"Meanwhile, the referee judging the candidates bundled with {args.problem} "
          "(no LLM involved):", file=sys.stderr)
    options = EvalOptions(device=args.device, timing_budget=args.timing_budget or 5.0)
    for path in candidates:
        result = evaluate(problem, path.read_text(encoding="utf-8"), options)
        verdict = f"{result.status}, speedup {result.speedup:.2f}x" if result.correct else result.status
        print(f"  {path.name:28s} {verdict}: {first_line(result.message, 160)}", file=sys.stderr, flush=True)


# runs ----------------------------------------------------------------------------------------

def run_runs_list(args) -> int:
    store = open_store(args.store)
    runs = [run_row(r) for r in store.runs()]
    if args.json:
        print(json.dumps({"store": str(store.path), "runs": runs}))
        return EXIT_OK
    if not runs:
        print(f"no runs in {store.path}")
    for r in runs:
        best = f"{r['best_speedup']:.3f}x" if r["best_speedup"] is not None else "-"
        print(f"{r['run_id']}  {r['status']:11s} {r['problem']:24s} {r['model']:24s} "
              f"{r['strategy']:9s} best {best:>8s}  {r['llm_calls']} calls")
    return EXIT_OK


def run_row(run: dict) -> dict:
    summary = run["summary"] or {}
    best = summary.get("best") or {}
    return {"run_id": run["id"], "status": run["status"], "problem": run["problem_name"],
            "model": run["model"], "strategy": run["strategy"], "created": run["created"],
            "best_speedup": best.get("speedup"), "llm_calls": summary.get("llm_calls", 0)}


def run_runs_show(args) -> int:
    from kernelopt.agent.store import StoreError

    store = open_store(args.store)
    try:
        run = store.run(args.run_id)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc
    candidates = [{k: c[k] for k in ("id", "parent_id", "llm_call_id", "code_hash", "status", "speedup",
                                     "message", "format_error", "strategy_data")}
                  for c in store.candidates(args.run_id)]
    calls = [{k: c[k] for k in ("id", "purpose", "occurrence", "prompt_tokens", "completion_tokens",
                                "latency_s", "cost", "attempts", "source", "error")}
             for c in store.calls(args.run_id)]
    if args.json:
        print(json.dumps({"run": {k: v for k, v in run.items() if k != "problem_source"},
                          "candidates": candidates, "llm_calls": calls}))
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
        speed = f"{c['speedup']:.3f}x" if c["speedup"] is not None else ""
        note = first_line(c["message"] or c["format_error"] or "", 90)
        print(f"  #{c['id']:<4d} parent {str(c['parent_id'] or '-'):>4s}  {status:14s} {speed:>9s}  {note}")
    return EXIT_OK

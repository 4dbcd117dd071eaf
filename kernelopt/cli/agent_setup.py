"""From the agent's options to a checked run: the options themselves, the store, the endpoint,
the run's settings (OptimizeConfig), its device and backend and a client, all checked before any
work; and a pass of the agent over a problem set (bench's agent mode, generate). Shared by
optimize, model optimize, mcp, runs, bench and generate."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

from kernelopt.agent.strategies import with_eval_defaults
from kernelopt.cli.console import ConsoleProgress
from kernelopt.cli.errors import EXIT_BAD_INPUT, EnvironmentFailure, UsageError, print_json_failure
from kernelopt.cli.options import (
    add_budget_options,
    add_endpoint_options,
    add_llm_options,
    add_run_eval_options,
    add_strategy_options,
    run_eval_settings,
)
from kernelopt.cli.selection import devices_from, problem_set_from
from kernelopt.cli.text import plural, progress

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


def add_search_options(p, budget_title: str):
    """The options of a search (optimize, model optimize): endpoint, strategy, budget, LLM,
    referee; then the records group (--store, --out, --json, --quiet), returned so that the
    command adds its own --resume to it."""
    add_endpoint_options(p)
    add_strategy_options(p)
    add_budget_options(p, budget_title)
    add_llm_options(p)
    add_run_eval_options(p)
    out = p.add_argument_group("records")
    out.add_argument("--store", default=None, metavar="PATH",
                     help="SQLite run store (default: $KERNELOPT_STORE or kernelopt-runs/store.sqlite)")
    return out


def add_output_flags(group, json_help: str) -> None:
    group.add_argument("--json", action="store_true", help=json_help)
    group.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


@contextmanager
def usage_errors():
    """Unusable input met while setting a run up (a problem, a problem set, the store, an
    option's value) as a UsageError: exit 2, nothing started."""
    from kernelopt.agent.store import StoreError
    from kernelopt.kernelbench import ProblemError, ProblemSetError

    try:
        yield
    except (ProblemError, ProblemSetError, StoreError) as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(f"invalid option: {exc}") from exc


def device_and_backend(device_name: str, backend_name: str | None) -> tuple[str, str]:
    """The device resolved ("auto": the best one here) and the backend checked against it."""
    from kernelopt.kernelbench.backends import resolve_backend
    from kernelopt.sandbox.device import resolve_device

    device = resolve_device(device_name)
    return device, resolve_backend(backend_name, device)


def stored_run(store, run_id: str):
    """(the stored run, its settings, its problem) of a run to continue."""
    from kernelopt.agent.search import OptimizeConfig, stored_problem

    run = store.run(run_id)
    return run, OptimizeConfig.from_json(run["config"]), stored_problem(run)


def checked_run(config, new: bool):
    """(device, LLM client, API key) for a run about to start or continue; a new run records the
    backend it asks for (a resumed one keeps its own, checked against this machine too)."""
    device, backend = device_and_backend(config.device, config.backend)
    if new:
        config.backend = backend
    client, api_key = checked_client(config)
    return device, client, api_key


def configured_endpoint(args) -> str | None:
    """The endpoint's URL, or None when neither a URL nor an API key is configured anywhere."""
    from kernelopt.agent.llm import resolve_endpoint

    base_url, _, configured = resolve_endpoint(args.base_url, args.api_key_env)
    return base_url if configured else None


def missing_endpoint(command: str, as_json: bool = False) -> int:
    """No endpoint: say how to configure one (exit 2). `command`: how the user's command starts;
    `as_json`: the command was asked for JSON, so stdout gets the failure object too."""
    print(NO_ENDPOINT_HELP.format(command=command), file=sys.stderr)
    if as_json:
        print_json_failure(command.split()[0], "bad_input", "no LLM endpoint is configured: set OPENAI_API_KEY "
                           "(and OPENAI_BASE_URL for a local server) or pass --base-url", EXIT_BAD_INPUT)
    return EXIT_BAD_INPUT


def new_config(args, base_url: str, problem_path: str, strategy: str, strategy_options: dict | None = None):
    """A new run's settings from the command line (strategy_options: instead of the options')."""
    from kernelopt.agent.search import OptimizeConfig

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
    if args.reuse_answers:
        config.use_cache = True
    if args.no_cache:
        config.use_cache = False
    if args.base_url:
        config.base_url = args.base_url
    if resuming:
        return
    table_price = price_from_table(args.price_table, config.model)
    config.price = list(args.price) if args.price else (list(table_price) if table_price else None)
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
    config.llm_options = llm_settings(args)
    config.eval_options = with_eval_defaults(config.strategy, run_eval_settings(args))
    for name, value in list(config.limits.items()) + list(config.strategy_options.items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise UsageError(f"{name} must not be negative")


def price_from_table(path: str | None, model: str) -> tuple[float, float] | None:
    from kernelopt.agent.llm import LLMConfigError, load_price_table

    if not path:
        return None
    try:
        price = load_price_table(path).get(model)
    except LLMConfigError as exc:
        raise UsageError(str(exc)) from exc
    return (price.input_per_mtok, price.output_per_mtok) if price else None


# the agent over a problem set ------------------------------------------------------------------

def agent_setup(args, command: str, out_root: str, strategy: str, strategy_options: dict | None = None,
                pool=None):
    """What a pass of the agent over a set needs, checked before any work, as one `SetRun`
    (problem set, settings, store, OUT, devices, API key, the Ray pool if any); None when no
    endpoint is configured (how to configure one was printed). Shared by bench and generate."""
    from kernelopt.agent.store import RunStore, StoreError
    from kernelopt.bench.agent_runs import SetRun, recorded_store
    from kernelopt.kernelbench import ProblemSetError
    from kernelopt.kernelbench.backends import resolve_backend
    from kernelopt.sandbox import EvalOptions
    from kernelopt.sandbox.isolation import IsolationError, select_backend

    base_url = configured_endpoint(args)
    if base_url is None:
        missing_endpoint(command, getattr(args, "json", False))
        return None
    try:
        problem_set = problem_set_from(args)
        # --ray: the judging actors' device (bench and generate set it once the pool is up)
        devices = [args.ray_device] if getattr(args, "ray_device", None) else devices_from(args)
        config = new_config(args, base_url, args.kernelbench, strategy, strategy_options)
        for device in devices:  # recorded with every run of the set
            config.backend = resolve_backend(config.backend, device)
        select_backend(args.isolation or EvalOptions().isolation, args.image or EvalOptions().image)
    except (ProblemSetError, IsolationError) as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(f"invalid option: {exc}") from exc
    _, api_key = checked_client(config)
    out = Path(args.out) if args.out else Path(out_root) / default_out_name(args.kernelbench, config)
    try:
        store = RunStore.open(args.store or recorded_store(out))
    except StoreError as exc:
        raise UsageError(str(exc)) from exc
    return SetRun(problem_set=problem_set, template=config, store=store, out=out, devices=devices,
                  api_key=api_key, pool=pool)


def run_set(driver, run) -> dict:
    """bench_agent or generate over the set (`run`: agent_setup's SetRun); their failures as the
    CLI reports them."""
    from kernelopt.bench.agent_runs import SetRunError
    from kernelopt.sandbox.isolation import IsolationError
    from kernelopt.sandbox.process import SandboxError

    config, problem_set = run.template, run.problem_set
    budget = config.limits.get("llm_calls")
    progress(f"{plural(len(problem_set), 'problem')} of {problem_set.source} with {config.model} "
             f"({config.strategy}, {budget} LLM calls each) on {', '.join(run.devices)}; records in {run.out}, "
             f"runs in {run.store.path}")
    try:
        with ConsoleProgress("problems") as report:
            return driver(run, report)
    except (SetRunError, IsolationError) as exc:
        raise UsageError(str(exc)) from exc
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc


def default_out_name(set_location: str, config) -> str:
    name = f"{Path(set_location).name or 'set'}-{config.model}-{config.strategy}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def llm_settings(args) -> dict:
    """The LLM request options given on the command line (add_llm_options), unset ones left out."""
    given = {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens,
             "max_completion_tokens": args.max_completion_tokens, "reasoning_effort": args.reasoning_effort,
             "concurrency": args.concurrency, "timeout": args.llm_timeout, "max_attempts": args.retries}
    return {name: value for name, value in given.items() if value is not None}

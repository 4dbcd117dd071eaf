"""`kernelopt bench`: a problem set at once, in one of two modes.

- agent (no --solutions): one `kernelopt optimize` run per problem with a per-problem budget
  (kernelopt/bench/agent_runs.py), every run in the run store;
- solutions (--solutions DIR): rescoring existing generations (kernelopt/bench/rescore.py);
  --solutions FILE.json[l] rescores a published release (CUDA-L1's format, kernelopt/bench/
  published.py): its entries' ref_code are the problems, so no --kernelbench is taken.

Both are resumable from OUT, continue past failing problems, take `--gpus` (one problem at a
time per GPU) or `--ray [ADDRESS]` (one problem at a time per judging actor of a Ray cluster,
kernelopt/cluster; results still written by this process alone) and end with KernelBench's metrics per level, printed and in OUT/summary.json.
Exit codes: 0 when every problem has its result; 1 (agent mode) when some run stopped on an
error (a rerun resumes it); 2 for unusable input or endpoint; 3 when the sandbox cannot run.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelopt.cli.agent_setup import agent_setup, run_set
from kernelopt.cli.cluster import add_ray_options, ray_pool
from kernelopt.cli.console import ConsoleProgress
from kernelopt.cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUN_FAILED, EnvironmentFailure, UsageError
from kernelopt.cli.options import (
    add_budget_options,
    add_endpoint_options,
    add_gpus_option,
    add_llm_options,
    add_problem_set_options,
    add_run_eval_options,
    add_strategy_options,
    run_eval_settings,
)
from kernelopt.cli.selection import devices_from, problem_set_from
from kernelopt.agent.store import describe_cost
from kernelopt.cli.text import plural


def add_command(commands) -> None:
    p = commands.add_parser(
        "bench", help="run the agent over a KernelBench problem set, or rescore generations (fast_p, geomean, per level)",
        description="Run the agent (kernelopt optimize) on every problem of a set with a per-problem budget, "
                    "or with --solutions judge KernelBench-named solutions (level_{L}_problem_{id}_sample_{s}"
                    "_kernel.py) with kernelopt's referee; resumably, and report KernelBench's metrics per "
                    "level. Problems without a correct result count as failures.")
    add_problem_set_options(p, required=False)
    p.add_argument("--solutions", default=None, metavar="DIR|FILE",
                   help="rescore this folder of generations (searched recursively) instead of running the agent; "
                        "or a published release file (CUDA-L1's JSON Lines: ref_code, custom_code, score_default "
                        "per entry), whose ref_code are the problems (no --kernelbench then)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="results folder; rerunning with it resumes (default kernelopt-bench/<solutions folder>, "
                        "or kernelopt-bench/<set>-<model>-<strategy> for the agent)")
    add_gpus_option(p)
    add_ray_options(p)
    p.add_argument("--jobs", type=int, default=2, help="solutions: candidates of one problem in flight (default 2)")
    p.add_argument("--baselines", default=None, metavar="NAMES",
                   help="also report the metrics against these baselines (comma-separated, e.g. "
                        "eager,compile; see kernelopt baselines), measured or taken from the store")
    p.add_argument("--baseline-store", default=None, metavar="FILE", help="baseline store, as for baselines")
    p.add_argument("--store", default=None, metavar="PATH",
                   help="agent: SQLite run store (default: the one OUT was started with, else $KERNELOPT_STORE "
                        "or kernelopt-runs/store.sqlite)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON summary on stdout")
    add_endpoint_options(p)
    add_strategy_options(p)
    add_budget_options(p, "agent: budget per problem (its search stops at the first one spent)")
    add_llm_options(p)
    add_run_eval_options(p, timeout_flags=("--timeout", "--eval-timeout"))
    p.set_defaults(handler=run_bench)


def run_bench(args) -> int:
    return run_rescore(args) if args.solutions else run_agent(args)


# agent mode ------------------------------------------------------------------------------------

AGENT_ONLY = ("base_url", "budget", "max_tokens_total", "max_cost", "max_evals", "max_wall",
              "target_speedup", "temperature", "top_p", "max_tokens", "max_completion_tokens",
              "reasoning_effort", "concurrency", "llm_timeout", "retries", "price", "store", "backend")


def run_agent(args) -> int:
    from kernelopt.bench.agent_runs import bench_agent

    if args.baselines:
        raise UsageError("--baselines applies to --solutions; for the agent's results run "
                         "`kernelopt bench --solutions` on them, or `kernelopt baselines`")
    if not args.kernelbench:
        raise UsageError("the agent over a set needs --kernelbench SET (or --solutions to rescore generations)")
    with ray_pool(args, args.device) as pool:
        args.ray_device = pool and pool.agent_device  # the runs' device is the actors'
        setup = agent_setup(args, "bench --kernelbench SET", "kernelopt-bench", strategy=args.strategy, pool=pool)
        if setup is None:
            return EXIT_BAD_INPUT
        summary = run_set(bench_agent, setup)
    print(json.dumps(summary) if args.json else render(summary))
    return EXIT_RUN_FAILED if summary["statuses"].get("run_failed") else EXIT_OK


# solutions mode --------------------------------------------------------------------------------

def run_rescore(args) -> int:
    from kernelopt.bench.baselines import default_names
    from kernelopt.bench.rescore import find_solutions
    from kernelopt.kernelbench import ProblemSetError
    from kernelopt.sandbox import EvalOptions

    given = [f"--{name.replace('_', '-')}" for name in AGENT_ONLY if getattr(args, name) not in (None, False)]
    if given:
        raise UsageError(f"{', '.join(given)}: agent options, not for --solutions (which only judges files)")
    solutions_dir = Path(args.solutions)
    if solutions_dir.is_file():
        return run_published(args, solutions_dir)
    if not solutions_dir.is_dir():
        raise UsageError(f"--solutions {solutions_dir}: no such folder or file")
    if not args.kernelbench:
        raise UsageError("--solutions DIR needs --kernelbench SET, the problems its files solve (only a "
                         "published release file, e.g. CUDA-L1's h100.json, carries its own problems)")
    try:
        problem_set = problem_set_from(args)
        devices = [args.device] if args.ray else devices_from(args)  # --ray: each actor's own device
        options = EvalOptions(device=devices[0], **run_eval_settings(args))
        names = default_names(devices[0], args.baselines.split(",")) if args.baselines else None
    except ProblemSetError as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(f"invalid option: {exc}") from exc
    solutions = find_solutions(solutions_dir)
    if not solutions:
        raise UsageError(f"--solutions {solutions_dir}: no files named level_L_problem_ID_sample_S_kernel.py")
    out = Path(args.out) if args.out else Path("kernelopt-bench") / solutions_dir.resolve().name
    return rescore_and_print(args, problem_set, solutions, options, out, names, devices)


def run_published(args, path: Path) -> int:
    """--solutions FILE: a published release (CUDA-L1's format), its problems from the file."""
    from kernelopt.bench.baselines import default_names
    from kernelopt.bench.published import published_summary, read_published
    from kernelopt.kernelbench import ProblemSetError, parse_id_ranges
    from kernelopt.sandbox import EvalOptions

    if args.kernelbench:
        raise UsageError(f"--solutions {path} is a release file whose entries carry their own problems (ref_code): "
                         "leave --kernelbench out (select with --level and --problems, the task ids)")
    try:
        published = read_published(path, levels=parse_id_ranges(args.level) if args.level else None,
                                   ids=parse_id_ranges(args.problems) if args.problems else None)
        devices = [args.device] if args.ray else devices_from(args)  # --ray: each actor's own device
        options = EvalOptions(device=devices[0], **run_eval_settings(args))
        names = default_names(devices[0], args.baselines.split(",")) if args.baselines else None
    except ProblemSetError as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(f"--solutions {path}: {exc}") from exc
    except OSError as exc:
        raise UsageError(f"--solutions {path}: cannot read it: {exc}") from exc
    out = Path(args.out) if args.out else Path("kernelopt-bench") / path.stem
    notes = [f"{path} line {bad['line']}: not judged: {bad['error']}" for bad in published.bad_lines]
    return rescore_and_print(args, published.problem_set, published.solutions, options, out, names, devices,
                             notes=notes,
                             annotate=lambda records: {"published": published_summary(published, records)})


def rescore_and_print(args, problem_set, solutions, options, out: Path, names, devices, *, notes=(),
                      annotate=None) -> int:
    """Judge the solutions with a progress display (after any `notes` lines), print the summary."""
    from kernelopt.bench.baselines import BaselineStore
    from kernelopt.bench.rescore import rescore
    from kernelopt.sandbox.isolation import IsolationError
    from kernelopt.sandbox.process import SandboxError

    from kernelopt.bench.summary import MixedDevicesError

    extra = {"annotate": annotate} if annotate else {}
    try:
        with ray_pool(args, options.device) as pool, ConsoleProgress("judging") as report:
            for line in notes:
                report(line)
            summary = rescore(problem_set, solutions, options, out, max(1, args.jobs), report, baselines=names,
                              store=BaselineStore(args.baseline_store) if names else None, devices=devices,
                              pool=pool, mix_devices=args.ray_mix_devices, **extra)
    except (IsolationError, MixedDevicesError) as exc:
        raise UsageError(str(exc)) from exc
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    print(json.dumps(summary) if args.json else render(summary))
    return EXIT_OK if summary["n_solutions"] else EXIT_BAD_INPUT


# output ----------------------------------------------------------------------------------------

def render(summary: dict) -> str:
    lines = ["level  problems  fast_0  fast_0.5  fast_0.8  fast_1  fast_1.5  fast_2  geomean  median"]
    for level, m in [*summary["levels"].items(), ("all", summary["overall"])]:
        speed = "  ".join(f"{m[k]:.2f}x".rjust(7) if m[k] else "      -" for k in ("geomean_speedup", "median_speedup"))
        fast = "  ".join(f"{m[k]:.2f}".rjust(len(k)) for k in ("fast_0", "fast_0.5", "fast_0.8", "fast_1",
                                                                 "fast_1.5", "fast_2"))
        lines.append(f"{level:<5}  {m['n_problems']:>8}  {fast}  {speed}")
    for name, against in summary.get("vs_baselines", {}).items():
        m = against["overall"]
        lines.append(f"against {name}: fast_1 {m['fast_1']:.2f}, fast_1.5 {m['fast_1.5']:.2f}, geomean "
                     + (f"{m['geomean_speedup']:.2f}x" if m["geomean_speedup"] else "-"))
    for problem, flags in summary["health"].items():
        lines.append(f"reference of level/problem {problem} flagged: {', '.join(flags)} (see docs/bench.md)")
    if summary["mode"] == "agent":
        statuses = ", ".join(f"{n} {status}" for status, n in sorted(summary["statuses"].items()))
        lines.append(f"{plural(summary['n_problems_run'], 'problem')} run by {summary['model']} "
                     f"({summary['strategy']}): {statuses}; {plural(summary['llm_calls'], 'LLM call')}, "
                     f"{describe_cost(summary['cost'])}")
        lines.append(f"every problem's record: {summary['results']}; runs: kernelopt runs list --store "
                     f"{summary['store']}")
    else:
        if summary.get("published"):
            from kernelopt.bench.published import render_published

            lines += render_published(summary["published"])
        lines.append(f"{summary['n_solutions']} solutions judged ({summary['n_outside_set']} for problems outside "
                     f"the set); every verdict: {summary['results']}")
    return "\n".join(lines)

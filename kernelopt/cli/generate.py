"""`kernelopt generate`: K scored candidates per problem of a set, for datasets
(kernelopt/bench/generate.py). The set is `--problems SET` as issue 6 names it (`--kernelbench`
is the same option, as bench spells it), and the id subset is `--ids`. Everything else (the
endpoint, LLM, evaluation options, --gpus, --store, resume from --out) is as for bench's agent
mode, whose set-up it shares, and so is `--ray [ADDRESS]` (candidates judged on a Ray cluster's
actors, the LLM calls and every record in this process). Exit codes as bench's.
"""

from __future__ import annotations

import json

from kernelopt.cli.agent_setup import agent_setup, run_set
from kernelopt.cli.cluster import add_ray_options, ray_pool
from kernelopt.cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUN_FAILED, UsageError
from kernelopt.cli.options import (
    add_budget_options,
    add_endpoint_options,
    add_gpus_option,
    add_llm_options,
    add_run_eval_options,
    add_samples_options,
)
from kernelopt.agent.store import describe_cost
from kernelopt.cli.text import plural


def add_command(commands) -> None:
    p = commands.add_parser(
        "generate", help="K scored candidates per problem of a set (RL and SFT datasets)",
        description="For every problem of a set: K independent first attempts, each refined T more turns "
                    "with the referee's feedback, every answer judged and stored with its parent and turn "
                    "(kernelopt export turns the store into datasets). Resumable with the same --out.")
    # --ids is stored as `problems` and the set as `kernelbench`, the names bench's set-up reads.
    p.add_argument("--problems", "--kernelbench", dest="kernelbench", required=True, metavar="SET",
                   help="the problem set: a KernelBench checkout, a folder of problem files, a .parquet file or "
                        "folder in the HuggingFace layout, or a dataset id in the local HF cache")
    p.add_argument("--level", default=None, help="levels to include, e.g. 1 or 1,2 (default: all)")
    p.add_argument("--ids", dest="problems", default=None, metavar="IDS",
                   help="problem ids, e.g. 1,3,5-9 (default: all)")
    add_endpoint_options(p)
    samples = p.add_argument_group("samples")
    add_samples_options(samples, required=True)
    samples.add_argument("--critique", action="store_true",
                         help="ask the LLM for a diagnosis before each refinement (one more call each)")
    add_budget_options(p, "budget per problem (default: the K x (1 + T) calls the samples need)")
    add_llm_options(p)
    add_run_eval_options(p)
    out = p.add_argument_group("records")
    add_gpus_option(out)
    add_ray_options(p)
    out.add_argument("--out", default=None, metavar="DIR",
                     help="results folder (OUT/generate.jsonl); rerunning with it resumes "
                          "(default kernelopt-generate/<set>-<model>-samples)")
    out.add_argument("--store", default=None, metavar="PATH",
                     help="SQLite run store (default: the one OUT was started with, else $KERNELOPT_STORE or "
                          "kernelopt-runs/store.sqlite)")
    out.add_argument("--json", action="store_true", help="print exactly one JSON summary on stdout")
    p.set_defaults(handler=run_generate)


def run_generate(args) -> int:
    from kernelopt.bench.generate import calls_needed, generate

    turns = args.turns or 0
    if args.samples < 1 or turns < 0:
        raise UsageError(f"--samples must be at least 1 and --turns at least 0 (got {args.samples}, {turns})")
    if args.budget is None:
        args.budget = calls_needed(args.samples, turns, args.critique)
    options = {"samples": args.samples, "turns": turns, "critique": args.critique or None}
    with ray_pool(args, args.device) as pool:
        args.ray_device = pool and pool.agent_device  # the runs' device is the actors'
        setup = agent_setup(args, "generate --problems SET --samples K", "kernelopt-generate", strategy="samples",
                            strategy_options=options, pool=pool)
        if setup is None:
            return EXIT_BAD_INPUT
        summary = run_set(generate, setup)
    print(json.dumps(summary) if args.json else render(summary))
    return EXIT_RUN_FAILED if summary["statuses"].get("run_failed") else EXIT_OK


def render(summary: dict) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary["counts"].items())) or "none"
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(summary["statuses"].items()))
    return "\n".join([
        (f"{plural(summary['problems'], 'problem')} ({statuses}), {summary['samples']} samples x "
         f"{plural(1 + summary['turns'], 'turn')} by {summary['model']}"),
        f"{plural(summary['candidates'], 'candidate')} ({summary['scored']} scored): {counts}",
        (f"{summary['problems_with_correct']} of them with a correct candidate; "
         f"{plural(summary['llm_calls'], 'LLM call')}, {describe_cost(summary['cost'])}"),
        (f"one line per problem: {summary['results']}; every candidate: kernelopt runs show RUN_ID --store "
         f"{summary['store']}"),
    ])

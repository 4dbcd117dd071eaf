"""`kernelopt bench`: a problem set at once (see kernelopt/agent/bench.py). This version scores
existing generations (`--solutions DIR`); running the agent over the set comes with the rest of
the KernelBench issue."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelopt.agent.cli import EXIT_BAD_INPUT, EXIT_OK, EnvironmentFailure, UsageError


def add_bench_command(commands) -> None:
    p = commands.add_parser(
        "bench", help="score generations over a KernelBench problem set (fast_p, geomean, per level)",
        description="Judge KernelBench-named solutions (level_{L}_problem_{id}_sample_{s}_kernel.py under "
                    "--solutions) against a problem set with kernelopt's referee, resumably, and report "
                    "KernelBench's metrics per level. Problems without a correct solution count as failures.")
    add_problem_set_options(p)
    p.add_argument("--solutions", required=True, metavar="DIR",
                   help="folder of generations to score (searched recursively)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="results folder; rerunning with it resumes (default kernelopt-bench/<solutions folder>)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--jobs", type=int, default=2, help="candidates of one problem in flight (default 2)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per evaluation (default 300)")
    p.add_argument("--timing-budget", type=float, default=10.0, metavar="S", help="seconds of timing at most")
    p.add_argument("--isolation", "--sandbox", dest="isolation", default="auto",
                   choices=["auto", "bubblewrap", "unshare", "none", "docker"], help="sandbox backend, as for eval")
    p.add_argument("--image", default="kernelopt-sandbox", help="the docker backend's image")
    p.add_argument("--baselines", default=None, metavar="NAMES",
                   help="also report the metrics against these baselines (comma-separated, e.g. "
                        "eager,compile; see kernelopt baselines), measured or taken from the store")
    p.add_argument("--baseline-store", default=None, metavar="FILE", help="baseline store, as for baselines")
    p.add_argument("--json", action="store_true", help="print exactly one JSON summary on stdout")
    p.set_defaults(handler=run_bench)


def add_problem_set_options(p) -> None:
    """--kernelbench, --level, --problems: shared by bench and baselines."""
    p.add_argument("--kernelbench", required=True, metavar="SET",
                   help="a KernelBench checkout (KernelBench/level1..4), a folder of problem files, a .parquet "
                        "file or folder in the HuggingFace layout, or a dataset id in the local HF cache")
    p.add_argument("--level", default=None, help="levels to include, e.g. 1 or 1,2 (default: all)")
    p.add_argument("--problems", default=None, metavar="IDS", help="problem ids, e.g. 1,3,5-9 (default: all)")


def problem_set_from(args):
    """The selected problem set; raises ProblemSetError saying what is wrong."""
    from kernelopt.kernelbench import load_problem_set, parse_id_ranges

    return load_problem_set(args.kernelbench, levels=parse_id_ranges(args.level) if args.level else None,
                            ids=parse_id_ranges(args.problems) if args.problems else None)


def run_bench(args) -> int:
    from kernelopt.agent.baselines import BaselineStore, default_names
    from kernelopt.agent.bench import find_solutions, rescore
    from kernelopt.kernelbench import ProblemSetError
    from kernelopt.sandbox import EvalOptions
    from kernelopt.sandbox.isolation import IsolationError
    from kernelopt.sandbox.process import SandboxError
    from kernelopt.sandbox.referee import resolve_device

    solutions_dir = Path(args.solutions)
    if not solutions_dir.is_dir():
        raise UsageError(f"--solutions {solutions_dir}: not a folder")
    try:
        problem_set = problem_set_from(args)
        device = resolve_device(args.device)
        options = EvalOptions(device=device, timeout=args.timeout, timing_budget=args.timing_budget,
                              isolation=args.isolation, image=args.image)
        names = default_names(device, args.baselines.split(",")) if args.baselines else None
    except ProblemSetError as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(f"invalid option: {exc}") from exc
    solutions = find_solutions(solutions_dir)
    if not solutions:
        raise UsageError(f"--solutions {solutions_dir}: no files named level_L_problem_ID_sample_S_kernel.py")
    out = Path(args.out) if args.out else Path("kernelopt-bench") / solutions_dir.resolve().name
    report = (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        summary = rescore(problem_set, solutions, options, out, max(1, args.jobs), report, baselines=names,
                          store=BaselineStore(args.baseline_store) if names else None)
    except IsolationError as exc:
        raise UsageError(str(exc)) from exc
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    print(json.dumps(summary) if args.json else render(summary))
    return EXIT_OK if summary["n_solutions"] else EXIT_BAD_INPUT


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
    lines.append(f"{summary['n_solutions']} solutions judged ({summary['n_outside_set']} for problems outside "
                 f"the set); every verdict: {summary['results']}")
    return "\n".join(lines)

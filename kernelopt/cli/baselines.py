"""`kernelopt baselines`: PyTorch's own execution modes for a problem set, measured by the
referee and stored for reuse (see kernelopt/bench/baselines.py)."""

from __future__ import annotations

import json

from kernelopt.cli.errors import EXIT_OK, EnvironmentFailure, UsageError
from kernelopt.cli.options import add_field_option, add_problem_set_options
from kernelopt.cli.selection import problem_set_from


def add_command(commands) -> None:
    p = commands.add_parser(
        "baselines", help="measure eager, torch.compile and CUDA-graph baselines for a problem set",
        description="Each baseline wraps the problem's Model (torch.compile in a mode, or a CUDA graph of "
                    "eager) and is judged by the referee like a candidate, on this device. Results are stored "
                    "per (problem, device model, torch and CUDA versions) and reused.")
    add_problem_set_options(p)
    p.add_argument("--baselines", default=None, metavar="NAMES",
                   help="comma-separated: eager, compile, compile-max-autotune-no-cudagraphs, "
                        "compile-reduce-overhead, cuda-graphs (default: all that the device supports)")
    p.add_argument("--store", default=None, metavar="FILE",
                   help="baseline store (default $KERNELOPT_BASELINES or ~/.cache/kernelopt/baselines.json)")
    add_field_option(p, "device")
    add_field_option(p, "timing_budget")
    add_field_option(p, "timeout", default=600.0)  # torch.compile compiles within the evaluation
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(handler=run_baselines)


def run_baselines(args) -> int:
    from kernelopt.cli.console import ConsoleProgress
    from kernelopt.bench.baselines import BaselineStore, default_names, measure_baselines
    from kernelopt.kernelbench import ProblemError, ProblemSetError
    from kernelopt.sandbox import EvalOptions
    from kernelopt.sandbox.process import SandboxError
    from kernelopt.sandbox.device import resolve_device

    try:
        problem_set = problem_set_from(args)
        device = resolve_device(args.device)
        names = default_names(device, args.baselines.split(",") if args.baselines else None)
        options = EvalOptions(device=device, timing_budget=args.timing_budget, timeout=args.timeout)
    except (ProblemSetError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    store = BaselineStore(args.store)
    rows = []
    problems = list(problem_set)
    with ConsoleProgress("baselines") as report:
        for done, problem in enumerate(problems, 1):
            try:
                measured = measure_baselines(problem, names, options, device, store, report=report)
            except ProblemError as exc:
                measured = {name: {"status": "problem_error", "message": str(exc)} for name in names}
            except SandboxError as exc:
                raise EnvironmentFailure(str(exc)) from exc
            rows.append({"level": problem.level, "problem_id": problem.problem_id, "name": problem.name,
                         "baselines": measured})
            report.update(done, len(problems))
    report = {"device": device, "store": str(store.path), "problems": rows}
    print(json.dumps(report) if args.json else render(rows, names))
    return EXIT_OK


def render(rows: list[dict], names: list[str]) -> str:
    lines = ["problem".ljust(32) + "".join(n.rjust(max(len(n), 9) + 2) for n in names)]
    for row in rows:
        cells = []
        for name in names:
            record = row["baselines"][name]
            text = f"{record['speedup_vs_eager']:.2f}x" if record.get("speedup_vs_eager") else record["status"]
            cells.append(text.rjust(max(len(name), 9) + 2))
        lines.append(f"L{row['level']} {row['problem_id']} {row['name']}"[:32].ljust(32) + "".join(cells))
    lines.append("(speedup of each baseline over eager, measured by the referee on this device)")
    return "\n".join(lines)

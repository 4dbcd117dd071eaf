"""`kernelopt baselines`: PyTorch's own execution modes for a problem set, measured by the
referee and stored for reuse (see kernelopt/bench/baselines.py)."""

from __future__ import annotations

import json

from kernelopt.cli.cluster import add_ray_options, ray_pool
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
    add_ray_options(p)
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(handler=run_baselines)


def run_baselines(args) -> int:
    from kernelopt.bench.baselines import BaselineStore, default_names
    from kernelopt.kernelbench import ProblemSetError
    from kernelopt.sandbox import EvalOptions
    from kernelopt.sandbox.device import resolve_device

    try:
        problem_set = problem_set_from(args)
        device = args.device if args.ray else resolve_device(args.device)  # --ray: each actor's own device
        if not args.ray:
            names = default_names(device, args.baselines.split(",") if args.baselines else None)
        options = EvalOptions(device=device, timing_budget=args.timing_budget, timeout=args.timeout)
    except (ProblemSetError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    store = BaselineStore(args.store)
    with ray_pool(args, device) as pool:
        if pool is not None:
            device = pool.device
            try:
                names = default_names(device, args.baselines.split(",") if args.baselines else None)
            except ValueError as exc:
                raise UsageError(str(exc)) from exc
        rows = measure_set(list(problem_set), names, options, device, store, pool)
    report = {"device": device, "store": str(store.path), "problems": rows}
    print(json.dumps(report) if args.json else render(rows, names))
    return EXIT_OK


def measure_set(problems: list, names: list[str], options, device: str, store, pool) -> list[dict]:
    """Each problem's baselines, in set order: one problem after another here, or one at a time
    per judging actor with --ray (the store written by this process only)."""
    from kernelopt.bench.baselines import measure_baselines
    from kernelopt.cli.console import ConsoleProgress
    from kernelopt.kernelbench import ProblemError
    from kernelopt.sandbox.process import SandboxError

    rows: dict[int, dict] = {}
    with ConsoleProgress("baselines") as report:
        def measure(item) -> None:
            index, problem = item
            try:
                measured = measure_baselines(problem, names, options, device, store, report=report, pool=pool)
            except ProblemError as exc:
                measured = {name: {"status": "problem_error", "message": str(exc)} for name in names}
            except SandboxError as exc:
                raise EnvironmentFailure(str(exc)) from exc
            rows[index] = {"level": problem.level, "problem_id": problem.problem_id, "name": problem.name,
                           "baselines": measured}
            report.update(len(rows), len(problems))

        items = list(enumerate(problems))
        if pool is None:
            for item in items:
                measure(item)
        else:
            from kernelopt.cluster import run_on_pool

            run_on_pool(items, pool, measure)
    return [rows[index] for index in sorted(rows)]


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

"""The `kernelopt` command line.

Exit codes: 0 when a verdict was reached (whatever it is), 2 for unusable input (a missing
file, an invalid problem, a device or isolation backend that is not available), 3 when the
sandbox itself failed (a worker could not start). `optimize` adds 1 for a run that started and
then stopped on an error (see optimize.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelopt import __version__

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3


class UsageError(Exception):
    """Unusable input: reported on stderr, exit code 2."""


class EnvironmentFailure(Exception):
    """The machine could not run the sandbox: reported on stderr, exit code 3."""


def parse_size(text: str) -> int:
    """'8G', '512M', '1.5GiB', '1000000' -> bytes (binary units), for argparse."""
    from kernelopt.sandbox.sizes import parse_size as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelopt", description="LLM-driven CUDA kernel optimization.")
    parser.add_argument("--version", action="version", version=f"kernelopt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_eval_command(commands)
    from kernelopt.cli.optimize import add_commands  # it imports this module's exit codes

    add_commands(commands)
    from kernelopt.cli.cache import add_cache_command

    add_cache_command(commands)
    from kernelopt.cli.doctor import add_doctor_command

    add_doctor_command(commands)
    from kernelopt.cli.bench import add_bench_command

    add_bench_command(commands)
    from kernelopt.cli.baselines import add_baselines_command

    add_baselines_command(commands)
    from kernelopt.cli.generate import add_generate_command

    add_generate_command(commands)
    from kernelopt.cli.export import add_export_command

    add_export_command(commands)
    from kernelopt.cli.report import add_report_command

    add_report_command(commands)
    from kernelopt.cli.serve import add_serve_command

    add_serve_command(commands)
    return parser


def add_eval_command(commands) -> None:
    p = commands.add_parser("eval", help="judge candidate kernels against a reference program",
                            description="Compile and run CAND.py's ModelNew against REF.py's Model in "
                                        "isolated workers; report correctness and speedup. Several "
                                        "candidates (or a directory of them) are judged in one batch "
                                        "that keeps the reference's worker warm.")
    p.add_argument("--reference", required=True, metavar="REF.py", help="KernelBench-format problem file")
    p.add_argument("--candidate", required=True, nargs="+", metavar="CAND.py",
                   help="file(s) defining class ModelNew; a directory means every *.py in it, sorted")
    p.add_argument("--jobs", type=int, default=2, metavar="N",
                   help="batch: candidates in flight, one judged while the others start and compile "
                        "(default 2)")
    add_judging_options(p)
    p.add_argument("--json", action="store_true",
                   help="print exactly one JSON object on stdout (a batch: one per line and candidate)")
    p.set_defaults(handler=run_eval)


def add_judging_options(p) -> None:
    """How candidates are judged: shared by `eval` and `serve` (whose requests are judged alike)."""
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--timeout", type=float, default=300.0, help="wall-clock limit in seconds (default 300)")
    p.add_argument("--memory-limit", type=parse_size, default=None, metavar="SIZE",
                   help="resident memory per worker, e.g. 8G (default: half of RAM)")
    p.add_argument("--correctness-trials", type=int, default=5, metavar="N", help="input sets checked (default 5)")
    p.add_argument("--atol", type=float, default=1e-2, help="absolute tolerance (default 1e-2)")
    p.add_argument("--rtol", type=float, default=1e-2, help="relative tolerance (default 1e-2)")
    p.add_argument("--max-rel-error", type=float, default=None,
                   help="bound on ||out-ref||/||ref|| (default: max(rtol, 1e-3))")
    p.add_argument("--precision-policy", choices=["flag", "reject"], default="flag",
                   help="reduced-precision arithmetic: flag it (default) or reject the candidate")
    p.add_argument("--isolation", "--sandbox", dest="isolation",
                   choices=["auto", "bubblewrap", "unshare", "none", "docker"], default="auto",
                   help="sandbox backend (default: the strongest namespace backend that works here; "
                        "docker: a container of --image per worker, see docs/sandbox.md)")
    p.add_argument("--image", default="kernelopt-sandbox",
                   help="the docker backend's sandbox image (default kernelopt-sandbox, built from the "
                        "Dockerfile)")
    p.add_argument("--timing-budget", type=float, default=10.0, metavar="S",
                   help="seconds spent timing at most (default 10)")
    p.add_argument("--timing-precision", type=float, default=0.05, metavar="P",
                   help="stop timing once the speedup's 95%% confidence interval is within +-P "
                        "(default 0.05; the time budget still caps it)")
    p.add_argument("--pin-timing", choices=["auto", "on", "off"], default="auto",
                   help="run both workers' timed calls of a round on one CPU core, changing it between "
                        "rounds (default auto: on; off leaves placement to the OS; see docs/referee.md)")
    p.add_argument("--seed", type=int, default=None, help="fix the trial seeds (default: secret random)")
    p.add_argument("--build-mode", choices=["fast", "exact", "stock", "off"], default="fast",
                   help="how load_inline/load extensions are built: by the host, cached (fast, exact, "
                        "stock) or in the candidate's sandbox (off); default fast, see docs/builds.md")
    p.add_argument("--build-cache", default=None, metavar="DIR",
                   help="build cache directory (default $KERNELOPT_BUILD_CACHE or ~/.cache/kernelopt/builds)")


def judging_options(args) -> dict:
    """The EvalOptions fields that add_judging_options' arguments set."""
    return dict(device=args.device, timeout=args.timeout, memory_limit=args.memory_limit,
                correctness_trials=args.correctness_trials, atol=args.atol, rtol=args.rtol,
                max_rel_error=args.max_rel_error, precision_policy=args.precision_policy,
                isolation=args.isolation, image=args.image, timing_budget=args.timing_budget,
                target_precision=args.timing_precision, seed=args.seed, pin_timing=args.pin_timing,
                build_mode=args.build_mode, build_cache=args.build_cache)


def run_eval(args) -> int:
    from kernelopt.kernelbench import ProblemError, load_problem
    from kernelopt.sandbox import EvalOptions, Evaluator, evaluate
    from kernelopt.sandbox.isolation import IsolationError
    from kernelopt.sandbox.process import SandboxError

    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    batch = len(args.candidate) > 1 or any(Path(c).is_dir() for c in args.candidate)
    paths = candidate_files(args.candidate)
    sources = [read_candidate(path) for path in paths]  # every file is checked before any work
    try:
        options = EvalOptions(**judging_options(args))
        problem = load_problem(args.reference)
        if not batch:
            print_result(evaluate(problem, sources[0], options), args.json)
            return EXIT_OK
        with Evaluator(problem, options, jobs=args.jobs, keep_spare=False) as evaluator:
            for index, result in evaluator.evaluate_many(sources):
                print_result(result, args.json, candidate=paths[index])
    except (ProblemError, IsolationError) as exc:
        raise UsageError(str(exc)) from exc
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    except ValueError as exc:  # pydantic's ValidationError and bad devices
        raise UsageError(f"invalid option: {exc}") from exc
    return EXIT_OK


def candidate_files(arguments: list[str]) -> list[Path]:
    """The --candidate arguments as files: a directory stands for its *.py files, sorted."""
    paths = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.py") if p.is_file())
            if not found:
                raise UsageError(f"candidate directory {path}: no *.py files in it")
            paths.extend(found)
        elif path.is_file():
            paths.append(path)
        else:
            raise UsageError(f"candidate {path}: file not found")
    return paths


def read_candidate(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"candidate {path}: cannot read file: {exc}") from exc


def print_result(result, as_json: bool, candidate: Path | None = None) -> None:
    """One verdict on stdout. In a batch (`candidate` given) a JSON object is one line with a
    "candidate" field, and a summary block starts with the candidate's path."""
    if candidate is None:
        print(result.model_dump_json() if as_json else result.summary())
    elif as_json:
        record = {"candidate": str(candidate), **json.loads(result.model_dump_json())}
        print(json.dumps(record, separators=(",", ":")))
    else:
        print(f"== {candidate}\n{result.summary()}\n")
    sys.stdout.flush()  # each verdict as soon as it is reached


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"kernelopt {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except EnvironmentFailure as exc:
        print(f"kernelopt {args.command}: sandbox failure: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


"""`kernelopt eval`: the referee's verdict on one or more candidates, from the command line.

Exit codes: 0 when a verdict was reached (whatever it is), 2 for unusable input (a missing
file, an invalid problem, a device or isolation backend that is not available), 3 when the
sandbox itself failed (a worker could not start).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelopt.cli.errors import EXIT_OK, EnvironmentFailure, UsageError
from kernelopt.cli.options import add_judging_options, judging_options


def add_command(commands) -> None:
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
        print(result.model_dump_json() if as_json else summary_text(result))
    elif as_json:
        record = {"candidate": str(candidate), **json.loads(result.model_dump_json())}
        print(json.dumps(record, separators=(",", ":")))
    else:
        print(f"== {candidate}\n{summary_text(result)}\n")
    sys.stdout.flush()  # each verdict as soon as it is reached


def summary_text(result) -> str:
    """The verdict's summary, its speed of light (correct candidates), then its profile's table
    (--profile)."""
    from kernelopt.sandbox.physics import sol_text

    sol = sol_text(result.timing)
    text = result.summary() + (f"\n{sol}" if sol else "")
    if result.profile is None:
        return text
    from kernelopt.sandbox.profiling import table

    return f"{text}\nprofile (advisory, outside the timed calls):\n{table(result.profile)}"

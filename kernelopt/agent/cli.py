"""The `kernelopt` command line.

Exit codes: 0 when a verdict was reached (whatever it is), 2 for unusable input (a missing
file, an invalid problem, a device or isolation backend that is not available), 3 when the
sandbox itself failed (a worker could not start). `optimize` adds 1 for a run that started and
then stopped on an error (see cli_optimize.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from kernelopt import __version__

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class UsageError(Exception):
    """Unusable input: reported on stderr, exit code 2."""


class EnvironmentFailure(Exception):
    """The machine could not run the sandbox: reported on stderr, exit code 3."""


def parse_size(text: str) -> int:
    """'8G', '512M', '1.5GiB', '1000000' -> bytes (binary units)."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: use e.g. 8G, 512M or a byte count")
    return int(float(match[1]) * _UNITS[match[2].lower()])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelopt", description="LLM-driven CUDA kernel optimization.")
    parser.add_argument("--version", action="version", version=f"kernelopt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_eval_command(commands)
    from kernelopt.agent.cli_optimize import add_commands  # it imports this module's exit codes

    add_commands(commands)
    return parser


def add_eval_command(commands) -> None:
    p = commands.add_parser("eval", help="judge a candidate kernel against a reference program",
                            description="Compile and run CAND.py's ModelNew against REF.py's Model in "
                                        "isolated workers; report correctness and speedup.")
    p.add_argument("--reference", required=True, metavar="REF.py", help="KernelBench-format problem file")
    p.add_argument("--candidate", required=True, metavar="CAND.py", help="file defining class ModelNew")
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
    p.add_argument("--isolation", choices=["auto", "bubblewrap", "unshare", "none"], default="auto",
                   help="sandbox backend (default: the strongest that works here)")
    p.add_argument("--timing-budget", type=float, default=10.0, metavar="S",
                   help="seconds spent timing at most (default 10)")
    p.add_argument("--seed", type=int, default=None, help="fix the trial seeds (default: secret random)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.set_defaults(handler=run_eval)


def run_eval(args) -> int:
    from kernelopt.kernelbench import ProblemError, load_problem
    from kernelopt.sandbox import EvalOptions, evaluate
    from kernelopt.sandbox.isolation import IsolationError
    from kernelopt.sandbox.process import SandboxError

    candidate_path = Path(args.candidate)
    if not candidate_path.is_file():
        raise UsageError(f"candidate {candidate_path}: file not found")
    try:
        candidate_source = candidate_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"candidate {candidate_path}: cannot read file: {exc}") from exc
    try:
        options = EvalOptions(
            device=args.device, timeout=args.timeout, memory_limit=args.memory_limit,
            correctness_trials=args.correctness_trials, atol=args.atol, rtol=args.rtol,
            max_rel_error=args.max_rel_error, precision_policy=args.precision_policy,
            isolation=args.isolation, timing_budget=args.timing_budget, seed=args.seed,
        )
        problem = load_problem(args.reference)
        result = evaluate(problem, candidate_source, options)
    except (ProblemError, IsolationError) as exc:
        raise UsageError(str(exc)) from exc
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    except ValueError as exc:  # pydantic's ValidationError and bad devices
        raise UsageError(f"invalid option: {exc}") from exc
    if args.json:
        print(result.model_dump_json())
    else:
        print(result.summary())
    return EXIT_OK


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


if __name__ == "__main__":
    sys.exit(main())

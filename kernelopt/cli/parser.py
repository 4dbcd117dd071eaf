"""The `kernelopt` parser, built from one module per command, and `main`.

Command modules take their exit codes and errors from errors.py and their shared options from
options.py; only this module knows them all, and none imports it.
"""

from __future__ import annotations

import argparse
import sys

from kernelopt import __version__
from kernelopt.cli import (
    baselines,
    bench,
    cache,
    doctor,
    evaluate,
    export,
    generate,
    mcp,
    model,
    optimize,
    report,
    runs,
    serve,
    tune,
)
from kernelopt.cli.errors import EXIT_BAD_INPUT, print_json_failure, run_handler

# In the order `kernelopt --help` lists them.
COMMANDS = (evaluate, optimize, runs, cache, doctor, bench, baselines, generate, export, report, serve, tune,
            model, mcp)


class _CommandLineError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser, self.message = parser, message


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors main() reports (its subcommands' parsers are this class too)."""

    def error(self, message: str):  # type: ignore[override]
        raise _CommandLineError(self, message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kernelopt", description="LLM-driven CUDA kernel optimization.")
    parser.add_argument("--version", action="version", version=f"kernelopt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
    except _CommandLineError as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc.message}", file=sys.stderr)
        if "--json" in argv:  # a script asked for JSON: it gets one object, failures included
            command = next((a for a in argv if not a.startswith("-")), None)
            print_json_failure(command, "bad_input", exc.message, EXIT_BAD_INPUT)
        return EXIT_BAD_INPUT
    return run_handler(args)

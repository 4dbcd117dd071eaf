"""The `kernelopt` parser, built from one module per command, and `main`.

Command modules take their exit codes and errors from errors.py and their shared options from
options.py; only this module knows them all, and none imports it.
"""

from __future__ import annotations

import argparse

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
from kernelopt.cli.errors import run_handler

# In the order `kernelopt --help` lists them.
COMMANDS = (evaluate, optimize, runs, cache, doctor, bench, baselines, generate, export, report, serve, tune,
            model, mcp)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelopt", description="LLM-driven CUDA kernel optimization.")
    parser.add_argument("--version", action="version", version=f"kernelopt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_handler(args)

"""`kernelopt doctor`: what this machine can do for the referee, and how to fix what is missing
(see kernelopt/sandbox/doctor.py)."""

from __future__ import annotations

import json

from kernelopt.cli.errors import EXIT_ENVIRONMENT, EXIT_OK


def add_command(commands) -> None:
    p = commands.add_parser(
        "doctor", help="check GPUs, driver, CUDA toolkit, torch and sandbox backends",
        description="Probes GPUs (nvidia-smi), the driver's CUDA version, nvcc against torch's CUDA "
                    "build, ninja, the C++ compiler and each sandbox backend (a CUDA kernel is run inside "
                    "bubblewrap when there is a GPU); says which backend and device evaluations use by "
                    "default and how to fix what is missing. Exit status 3 when torch itself is unusable.")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(handler=run_doctor)


def run_doctor(args) -> int:
    from kernelopt.cli.console import print_table
    from kernelopt.sandbox.doctor import diagnose, render

    report = diagnose()
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        rows = [("ok" if c.ok else "ERROR" if c.required else "missing", c.name,
                 c.detail + (f"\nfix: {c.fix}" if not c.ok and c.fix else "")) for c in report.checks]
        print_table(("", "check", "detail"), rows, render(report).splitlines(),
                    title=f"default device: {report.default_device}; default sandbox: {report.default_backend}")
    return EXIT_OK if report.ok else EXIT_ENVIRONMENT

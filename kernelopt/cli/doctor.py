"""`kernelopt doctor`: what this machine can do for the referee, and how to fix what is missing
(see kernelopt/sandbox/doctor.py)."""

from __future__ import annotations

import json

from kernelopt.cli.cluster import add_ray_options
from kernelopt.cli.errors import EXIT_ENVIRONMENT, EXIT_OK, UsageError


def add_command(commands) -> None:
    p = commands.add_parser(
        "doctor", help="check GPUs, driver, CUDA toolkit, torch and sandbox backends",
        description="Probes GPUs (nvidia-smi), the driver's CUDA version, nvcc against torch's CUDA "
                    "build, ninja, the C++ compiler and each sandbox backend (a CUDA kernel is run inside "
                    "bubblewrap when there is a GPU); says which backend and device evaluations use by "
                    "default and how to fix what is missing. Exit status 3 when torch itself is unusable.")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    add_ray_options(p, pool=False)
    p.set_defaults(handler=run_doctor)


def run_doctor(args) -> int:
    if args.ray:
        return run_cluster_doctor(args)
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


def run_cluster_doctor(args) -> int:
    """--ray: the cluster's nodes, each with its CPUs, GPUs and the kernelopt, torch and Python it
    would judge with (asked of the node itself); exit 3 when a node cannot import kernelopt or
    runs another version than this one."""
    import kernelopt
    from kernelopt.cli.console import print_table
    from kernelopt.cluster import ClusterError, disconnect
    from kernelopt.cluster.connect import is_connected
    from kernelopt.cluster.nodes import cluster_report

    owned = not is_connected()
    try:
        report = cluster_report(args.ray)
    except ClusterError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        if owned:
            disconnect()
    problems = [n for n in report["nodes"] if n["alive"] and (n.get("error") or n.get("kernelopt") != kernelopt.__version__)]
    if args.json:
        print(json.dumps({**report, "driver_kernelopt": kernelopt.__version__, "ok": not problems}))
    else:
        rows = [(("ok" if n not in problems else "ERROR") if n["alive"] else "dead", n.get("host") or n["address"],
                 f"{n['cpus']:g} CPUs, {n['gpus']:g} GPUs" + (f" ({', '.join(n['gpu_models'])})" if n.get("gpu_models") else ""),
                 n.get("error") or f"kernelopt {n.get('kernelopt')}, torch {n.get('torch')}, Python {n.get('python')}")
                for n in report["nodes"]]
        plain = [f"{len(report['nodes'])} node(s), {report['cpus']:g} CPUs, {report['gpus']:g} GPUs at "
                 f"{report['address']}; this driver runs kernelopt {kernelopt.__version__}"]
        plain += ["  ".join(row) for row in rows]
        print_table(("", "node", "resources", "software"), rows, plain, title=f"Ray cluster at {report['address']}")
    return EXIT_ENVIRONMENT if problems else EXIT_OK

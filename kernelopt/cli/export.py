"""`kernelopt export`: stored runs as training data (jsonl, sft, preference, trajectory, verl).

The store is read by kernelopt/agent/records.py; the formats are built and written by
kernelopt/rewards/export.py. Exit codes: 0 when the file was written (even with no rows), 2 for
unusable input (no store, an unknown run, format or reward, a gamma outside [0, 1], pyarrow
missing for verl, an output path that cannot be written).
"""

from __future__ import annotations

import json
import sys

from kernelopt.cli.errors import EXIT_OK, UsageError


def add_command(commands) -> None:
    from kernelopt.rewards.export import FORMATS

    formats = "; ".join(f"{f.name}: {f.description}" for f in FORMATS.values())
    p = commands.add_parser(
        "export", help="write stored runs as RL / fine-tuning data",
        description="Export every scored attempt of the stored runs as training data. Formats: "
                    f"{formats}. Schemas: docs/export.md.")
    p.add_argument("--store", default=None, metavar="PATH",
                   help="SQLite run store (default: $KERNELOPT_STORE or kernelopt-runs/store.sqlite)")
    p.add_argument("--run", action="extend", nargs="+", default=None, metavar="RUN_ID", dest="runs",
                   help="only these runs (repeatable; default: every run in the store)")
    p.add_argument("--format", required=True, metavar="FORMAT", help=f"one of {', '.join(FORMATS)}")
    p.add_argument("--out", required=True, metavar="FILE", help="output file (overwritten)")
    p.add_argument("--reward", default="speedup", metavar="SPEC",
                   help="reward function, e.g. speedup (default), log_speedup:clip=2, cuda_l1:k=3, "
                        "binary (see docs/rewards.md)")
    p.add_argument("--gamma", type=float, default=1.0,
                   help="trajectory: discount of the returns, 0 to 1 (default 1.0)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.set_defaults(handler=run_export)


def run_export(args) -> int:
    from kernelopt.agent.records import load_records
    from kernelopt.agent.store import RunStore, StoreError
    from kernelopt.rewards import RewardError, make_reward
    from kernelopt.rewards.export import ExportError, check_gamma, export_records, get_format

    try:   # every setting is checked before the store is read
        get_format(args.format)
        reward = make_reward(args.reward)
        check_gamma(args.gamma)
        store = RunStore.open(args.store, existing=True)
        try:
            runs, records = load_records(store, args.runs)
        finally:
            store.close()
        rows = export_records(records, args.format, args.out, reward=reward.spec, gamma=args.gamma)
    except (ExportError, RewardError, StoreError) as exc:
        raise UsageError(str(exc)) from exc
    report = {"format": args.format, "out": str(args.out), "rows": rows, "runs": len(runs),
              "candidates": len(records), "reward": reward.spec, "gamma": args.gamma,
              "store": str(store.path)}
    print(f"exported {rows} {args.format} rows from {len(records)} candidates of {len(runs)} runs "
          f"to {args.out} (reward {reward.spec})", file=sys.stderr)
    if args.json:
        print(json.dumps(report))
    return EXIT_OK

"""Problem health over a whole KernelBench checkout: which references no candidate can be judged
fairly against (kernelopt/sandbox/problem_health.py: nondeterministic, input_independent, near_constant,
below_tolerance, degenerate_output, does_not_fit, reference_fails, ... whatever check_health
returns).

Each problem of the chosen levels, at each chosen git revision (`--ref`, repeatable; a problem
file whose text is the same at several revisions is checked once), is loaded into the referee's
sandbox (`Evaluator(problem, options)` from kernelopt.sandbox.batch) and probed by
`check_health(evaluator, options)`, one problem at a time, under a memory limit per worker
(default 8 GiB) and a time limit (default 300 s): a problem too big for the machine is
reported (`does_not_fit`, or `reference_fails` with the worker's message) instead of bringing
the machine down. Every probe is appended to OUT/health.jsonl as it is reached; a rerun with the
same --out skips what is there (delete the file to probe again). The flagged problems go to
OUT/health.md (a Markdown table: level, id, name, revisions, sizes, flags, details), printed
too, and everything to OUT/health.json. Usage:

    .venv/bin/python benchmarks/kernelbench_health.py --kernelbench PATH [--ref REV ...] [--level N ...]
        [--problems 1,3,5-9] [--device cpu|cuda] [--memory-limit GIB] [--timeout S] [--out DIR]
        [--sandbox B]

PATH is a KernelBench clone (or a bare git directory with --ref); without --ref the working
tree's files are checked. Both the original (v0) and the current sizes, all levels, on CPU:

    nice -n 19 .venv/bin/python benchmarks/kernelbench_health.py --kernelbench ~/KernelBench \\
        --ref v0 --ref main --device cpu --out health-cpu
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_checkout import (  # noqa: E402
    CheckoutError, export_problems, label_of, markdown_cell, read_jsonl_by_key, size_constants,
)

GIB = 1 << 30


def probe(problem, options) -> dict:
    """check_health's flags and details for one problem; a failure of the harness itself (not
    of the reference) is reported as the flag `health_check_failed`."""
    from kernelopt.kernelbench import ProblemError
    from kernelopt.sandbox.batch import Evaluator
    from kernelopt.sandbox.problem_health import check_health

    try:
        with Evaluator(problem, options, jobs=1, keep_spare=False) as evaluator:
            health = check_health(evaluator, options)
        return {"flags": list(health.flags), "details": list(health.details)}
    except ProblemError as exc:
        return {"flags": ["reference_fails"], "details": [f"reference_fails: {exc.cause[:500]}"]}
    except Exception as exc:  # noqa: BLE001 - one problem's failure must not stop the sweep
        return {"flags": ["health_check_failed"], "details": [f"health_check_failed: {type(exc).__name__}: "
                                                              f"{str(exc)[:500]}"]}


def too_big(rows: list[dict]) -> list[dict]:
    """Problems this machine could not run: out of memory, or no answer within the time limit."""
    return [r for r in rows if "does_not_fit" in r["flags"] or any("did not answer in time" in d for d in r["details"])]


def markdown(report: dict) -> str:
    rows = report["problems"]
    flagged = [r for r in rows if r["flags"]]
    counts: dict[str, int] = {}
    for row in flagged:
        for flag in row["flags"]:
            counts[flag] = counts.get(flag, 0) + 1
    revisions = "; ".join(f"{s['label']} = {s['commit'][:12] if s['commit'] else 'working tree'}"
                          + (f" ({s['commit_date']})" if s["commit_date"] else "") for s in report["sources"])
    o = report["options"]
    lines = ["## KernelBench problem health", "",
             f"{report['checkout']}: {revisions}; levels {', '.join(map(str, report['levels']))}; device "
             f"{report['device']}; memory limit {o['memory_limit'] / GIB:g} GiB per worker, timeout "
             f"{o['timeout']:g} s; {report['environment']['cpus']} CPU cores, torch {report['environment']['torch']}.",
             "",
             f"{len(rows)} distinct problem files checked ({report['n_problem_revisions']} problem-revisions); "
             f"{len(flagged)} flagged" + (": " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                                          if counts else "") + f". Too big or too slow for this machine: "
             f"{len(too_big(rows))} (`does_not_fit`, or the reference did not answer within the timeout).", ""]
    if flagged:
        lines += ["| level | id | name | revisions | sizes | flags | details |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['level']} | {r['problem_id']} | {markdown_cell(r['name'])} | {', '.join(r['revisions'])} | "
                  f"{markdown_cell(r['sizes'][:80])} | {', '.join(r['flags'])} | {markdown_cell('; '.join(r['details'])[:600])} |"
                  for r in flagged]
    else:
        lines.append("No problem was flagged.")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", required=True, metavar="PATH", help="a KernelBench clone or git directory")
    parser.add_argument("--ref", action="append", default=None, metavar="REV",
                        help="a revision to check (repeatable; v0: original sizes; v0.1 or main: July 2025 "
                             "sizes); default: the working tree as it is")
    parser.add_argument("--level", type=int, action="append", default=None, metavar="N",
                        help="a level to include (repeatable; default: all)")
    parser.add_argument("--problems", default=None, metavar="IDS", help="problem ids, e.g. 1,3,5-9 (default: all)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--memory-limit", type=float, default=8.0, metavar="GIB",
                        help="resident memory per worker process, GiB (default 8)")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="S", help="seconds per problem (default 300)")
    parser.add_argument("--sandbox", default=None, metavar="B", help="isolation backend (default auto)")
    parser.add_argument("--out", default=None, metavar="DIR", help="default kernelbench-health-DEVICE")
    args = parser.parse_args()

    from kernelopt.kernelbench import load_problem_set, parse_id_ranges
    from kernelopt.sandbox import EvalOptions

    levels = set(args.level) if args.level else None
    ids = parse_id_ranges(args.problems) if args.problems else None
    out = Path(args.out or f"kernelbench-health-{args.device}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    options = EvalOptions(device=args.device, memory_limit=int(args.memory_limit * GIB), timeout=args.timeout,
                          **({"isolation": args.sandbox} if args.sandbox else {}))

    sources, work = [], {}  # work: content hash -> (problem, [revision labels])
    for ref in args.ref or [None]:
        try:
            info = export_problems(Path(args.kernelbench), ref, levels, out / "problems" / (ref or "tree"))
        except CheckoutError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        info["label"] = label_of(info)
        sources.append(info)
        for problem in load_problem_set(info["root"], levels=levels, ids=ids):
            entry = work.setdefault(problem.content_hash, (problem, []))
            entry[1].append(info["label"])

    log_path = out / "health.jsonl"
    done = read_jsonl_by_key(log_path)
    settings = f"{args.device}/{options.memory_limit}/{options.timeout:g}"
    order = {info["label"]: index for index, info in enumerate(sources)}
    items = sorted(work.values(), key=lambda item: (item[0].level or 0, item[0].problem_id or 0, order[item[1][0]]))
    started, probed = time.monotonic(), 0
    rows = []
    for number, (problem, revisions) in enumerate(items, 1):
        key = f"{problem.content_hash}/{settings}"
        label = f"level {problem.level} problem {problem.problem_id} ({problem.name}, {', '.join(revisions)})"
        if key in done:
            record, note = done[key], " (from an earlier run)"
        else:
            began = time.monotonic()
            record = {"key": key, "level": problem.level, "problem_id": problem.problem_id, "name": problem.name,
                      "content_hash": problem.content_hash, **probe(problem, options),
                      "seconds": round(time.monotonic() - began, 2)}
            with open(log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
            probed += 1
            note = f" in {record['seconds']:.0f} s"
        remaining = (time.monotonic() - started) / probed * (len(items) - number) if probed else 0.0
        print(f"[{number}/{len(items)}] {label}: {', '.join(record['flags']) or 'healthy'}{note}  "
              f"ETA {remaining / 60:.0f} min", file=sys.stderr, flush=True)
        rows.append({"level": problem.level, "problem_id": problem.problem_id, "name": problem.name,
                     "file": Path(problem.path).name, "revisions": revisions, "sizes": size_constants(problem.source),
                     "flags": record["flags"], "details": record["details"], "seconds": record.get("seconds")})

    import torch

    report = {"checkout": str(Path(args.kernelbench).expanduser().resolve()), "sources": sources,
              "levels": sorted({r["level"] for r in rows}), "device": args.device,
              "options": {"memory_limit": options.memory_limit, "timeout": options.timeout,
                          "isolation": options.isolation},
              "environment": {"cpus": os.cpu_count(), "torch": torch.__version__,
                              "python": platform.python_version(), "platform": platform.platform()},
              "n_problem_revisions": sum(len(r["revisions"]) for r in rows), "problems": rows}
    text = markdown(report)
    (out / "health.md").write_text(text, encoding="utf-8")
    (out / "health.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(text)
    print(f"report: {out / 'health.md'}, {out / 'health.json'}; probes: {log_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

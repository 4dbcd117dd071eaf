"""Exact copies of every KernelBench problem, judged by `kernelopt bench --solutions`.

For every problem of a KernelBench checkout (the chosen levels, at the chosen git revision) the
candidate is the problem's own file with the class `Model` renamed `ModelNew` (every use of the
name, e.g. `super(Model, self)`; nothing else changed). An honest referee judges each one
`correct` at about 1.0x, with a 95 % interval that contains 1.0. The copies are written as
`OUT/generations/level_{L}_problem_{id}_sample_0_kernel.py` and judged through the real CLI,
`kernelopt bench --kernelbench OUT/problems --solutions OUT/generations --out OUT/bench --json`,
in a subprocess (its progress goes to stderr; rerun with the same --out to resume). Measured and
reported: problems judged correct, the spread of their speedups (min, p5, median, p95, max;
how many within 0.8x-1.25x), how many speedup intervals contain 1.0 (`timing.speedup_precision`
of each verdict record), and every verdict other than `correct` with its message and the
problem's health flags. Markdown on stdout and in OUT/identity.md, everything in
OUT/identity.json. Usage:

    .venv/bin/python benchmarks/kernelbench_identity.py --kernelbench PATH [--ref REV] [--level 1 ...]
        [--problems 1,3,5-9] [--device cpu|cuda] [--out DIR] [--timing-budget S] [--timeout S]
        [--correctness-trials N] [--sandbox B] [--gpus IDS] [--build-mode M]

PATH is a KernelBench clone (or a bare git directory with --ref). --ref exports that revision's
problems with `git archive` (`v0`: the original sizes; `v0.1`: the July 2025 sizes, also those
of `main`); without it the working tree's files are used. Level 1 at the original sizes on CPU:

    nice -n 19 .venv/bin/python benchmarks/kernelbench_identity.py --kernelbench ~/KernelBench \\
        --ref v0 --level 1 --device cpu --timing-budget 2 --out identity-l1-v0-cpu
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import tokenize
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_checkout import CheckoutError, export_problems, markdown_cell, read_jsonl_by_key  # noqa: E402

KERNELOPT = str(Path(sys.executable).parent / "kernelopt")
HONEST_RANGE = (0.8, 1.25)


def as_candidate(source: str) -> str:
    """The problem's source with the name `Model` (the class and every use of it, not attributes
    like `x.Model`, not strings or comments) renamed `ModelNew`; every other byte kept."""
    lines = source.splitlines(keepends=True)
    hits: dict[int, list[int]] = {}
    previous = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string == "Model" and not (
                previous is not None and previous.type == tokenize.OP and previous.string == "."):
            hits.setdefault(token.start[0] - 1, []).append(token.start[1])
        if token.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            previous = token
    for row, columns in hits.items():
        line = lines[row]
        for column in sorted(columns, reverse=True):
            line = line[:column] + "ModelNew" + line[column + len("Model"):]
        lines[row] = line
    candidate = "".join(lines)
    defined = {n.name for n in ast.parse(candidate).body if isinstance(n, ast.ClassDef)}
    if "ModelNew" not in defined:
        raise ValueError("no top-level class Model to rename")
    return candidate


def solution_key(level: int, problem_id: int, code: str) -> str:
    """The key `kernelopt bench --solutions` files the verdict under (kernelopt/bench/rescore.py)."""
    return f"{level}/{problem_id}/0/{hashlib.sha256(code.encode('utf-8')).hexdigest()[:16]}"


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interval(record: dict) -> tuple[float | None, float | None, bool | None]:
    """(precision, low, high-contains-1.0) of a verdict's speedup; Nones when not known."""
    precision = (record.get("timing") or {}).get("speedup_precision")
    speedup = record.get("speedup")
    if precision is None or not speedup:
        return None, None, None
    low, high = speedup * (1 - precision), speedup * (1 + precision)
    return precision, low, low <= 1.0 <= high


def summarize(rows: list[dict]) -> dict:
    correct = [r for r in rows if r["status"] == "correct" and r["speedup"]]
    speedups = [r["speedup"] for r in correct]
    healthy = [r for r in rows if not r["health_flags"]]
    low, high = HONEST_RANGE

    def honest(r: dict) -> bool:
        return r["status"] == "correct" and bool(r["speedup"]) and low <= r["speedup"] <= high

    summary = {
        "n_problems": len(rows),
        "n_judged": sum(r["status"] != "not_judged" for r in rows),
        "statuses": dict(Counter(r["status"] for r in rows)),
        "n_correct": len(correct),
        "speedup": None,
        "n_within_range": sum(honest(r) for r in rows),
        "n_below_range": sum(s < low for s in speedups),
        "n_above_range": sum(s > high for s in speedups),
        "n_with_interval": sum(r["interval_contains_1"] is not None for r in correct),
        "n_interval_contains_1": sum(r["interval_contains_1"] is True for r in correct),
        "n_flagged": len(rows) - len(healthy),
        "health_flags": dict(Counter(f for r in rows for f in r["health_flags"])),
        "healthy": {"n_problems": len(healthy), "n_correct": sum(r["status"] == "correct" for r in healthy),
                    "n_within_range": sum(honest(r) for r in healthy),
                    "n_interval_contains_1": sum(r["interval_contains_1"] is True for r in healthy)},
    }
    if speedups:
        summary["speedup"] = {"min": min(speedups), "p5": percentile(speedups, 0.05),
                              "median": statistics.median(speedups), "p95": percentile(speedups, 0.95),
                              "max": max(speedups), "geomean": statistics.geometric_mean(speedups)}
    return summary


def _speed(value) -> str:
    return f"{value:.3f}x" if value else "-"


def markdown(report: dict) -> str:
    s, kb = report["summary"], report["kernelbench"]
    low, high = HONEST_RANGE
    where = f"{kb['checkout']} at {kb['ref'] or 'its working tree'}" + (
        f" ({kb['commit'][:12]}, {kb['commit_date']})" if kb["commit"] else "")
    env = report["environment"]
    lines = ["## Exact copies of KernelBench problems judged by `kernelopt bench --solutions`", "",
             f"KernelBench {where}; levels {', '.join(map(str, kb['levels']))}; device {report['device']}; "
             f"{env['cpus']} CPU cores; torch {env['torch']}; {report['wall_s']:.0f} s. Command: "
             f"`{report['bench_command']}`", "",
             "| measure | value |", "| --- | --- |",
             f"| problems | {s['n_problems']} ({s['n_judged']} judged) |",
             f"| verdicts | {', '.join(f'{k} {v}' for k, v in sorted(s['statuses'].items()))} |",
             f"| judged correct | {s['n_correct']} of {s['n_problems']} |"]
    if s["speedup"]:
        d = s["speedup"]
        lines += [f"| speedup of the correct: min / p5 / median / p95 / max | {d['min']:.3f}x / {d['p5']:.3f}x / "
                  f"{d['median']:.3f}x / {d['p95']:.3f}x / {d['max']:.3f}x (geomean {d['geomean']:.3f}x) |"]
    lines += [f"| correct within {low}x-{high}x | {s['n_within_range']} of {s['n_correct']} ({s['n_below_range']} "
              f"below, {s['n_above_range']} above) |",
              f"| 95 % interval contains 1.0 | {s['n_interval_contains_1']} of {s['n_with_interval']} correct with an "
              "interval |",
              f"| problems with health flags | {s['n_flagged']}" + (
                  f" ({', '.join(f'{k} {v}' for k, v in sorted(s['health_flags'].items()))})" if s["health_flags"]
                  else "") + " |",
              f"| healthy problems: correct / within range / interval contains 1.0 | {s['healthy']['n_correct']} / "
              f"{s['healthy']['n_within_range']} / {s['healthy']['n_interval_contains_1']} of "
              f"{s['healthy']['n_problems']} |"]
    rows = report["problems"]
    failed = [r for r in rows if r["status"] != "correct"]
    lines += ["", f"### Not judged correct ({len(failed)})", ""]
    if failed:
        lines += ["| level | id | name | status | health flags | message |", "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['level']} | {r['problem_id']} | {markdown_cell(r['name'])} | {r['status']} | "
                  f"{markdown_cell(', '.join(r['health_flags']) or '-')} | {markdown_cell(r['message'][:400])} |" for r in failed]
    else:
        lines.append("None.")
    odd = [r for r in rows if r["status"] == "correct" and (
        not (low <= (r["speedup"] or 0) <= high) or r["interval_contains_1"] is False)]
    lines += ["", f"### Correct, but outside {low}x-{high}x or with an interval that excludes 1.0 ({len(odd)})", ""]
    if odd:
        lines += ["| level | id | name | speedup | 95 % interval | health flags | verdict flags |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['level']} | {r['problem_id']} | {markdown_cell(r['name'])} | {_speed(r['speedup'])} | "
                  + (f"{r['interval'][0]:.3f}-{r['interval'][1]:.3f}" if r["interval"] else "-")
                  + f" | {markdown_cell(', '.join(r['health_flags']) or '-')} | {markdown_cell(', '.join(r['flags']) or '-')} |"
                  for r in odd]
    else:
        lines.append("None.")
    lines += ["", "### Every problem", "", "| level | id | name | status | speedup | +- (95 %) | health flags |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['level']} | {r['problem_id']} | {markdown_cell(r['name'])} | {r['status']} | {_speed(r['speedup'])} | "
              + (f"{r['precision']:.1%}" if r["precision"] is not None else "-")
              + f" | {markdown_cell(', '.join(r['health_flags']) or '-')} |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", required=True, metavar="PATH", help="a KernelBench clone or git directory")
    parser.add_argument("--ref", default=None, metavar="REV",
                        help="export this revision's problems (v0: original sizes; v0.1 or main: July 2025 sizes); "
                             "default: the working tree as it is")
    parser.add_argument("--level", type=int, action="append", default=None, metavar="N",
                        help="a level to include (repeatable; default: all)")
    parser.add_argument("--problems", default=None, metavar="IDS", help="problem ids, e.g. 1,3,5-9 (default: all)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="problems, copies, bench results and the report (default kernelbench-identity-REF-DEVICE)")
    bench = parser.add_argument_group("passed to kernelopt bench")
    bench.add_argument("--timing-budget", default=None, metavar="S")
    bench.add_argument("--timeout", default=None, metavar="S")
    bench.add_argument("--correctness-trials", default=None, metavar="N")
    bench.add_argument("--sandbox", default=None, metavar="B")
    bench.add_argument("--build-mode", default=None, metavar="M")
    bench.add_argument("--gpus", default=None, metavar="IDS")
    parser.add_argument("--kernelopt", default=KERNELOPT, help=f"the kernelopt command (default {KERNELOPT})")
    args = parser.parse_args()

    levels = set(args.level) if args.level else None
    out = Path(args.out or f"kernelbench-identity-{args.ref or 'tree'}-{args.device}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        kb = export_problems(Path(args.kernelbench), args.ref, levels, out / "problems")
    except CheckoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from kernelopt.kernelbench import load_problem_set, parse_id_ranges

    problem_set = load_problem_set(out / "problems", levels=levels,
                                   ids=parse_id_ranges(args.problems) if args.problems else None)
    generations = out / "generations"
    generations.mkdir(exist_ok=True)
    rows = []
    for problem in problem_set:
        row = {"level": problem.level, "problem_id": problem.problem_id, "name": problem.name,
               "file": Path(problem.path).name, "status": "not_judged", "speedup": None, "precision": None,
               "interval": None, "interval_contains_1": None, "message": "", "flags": [], "health_flags": [],
               "health_details": [], "key": None}
        try:
            code = as_candidate(problem.source)
        except (SyntaxError, tokenize.TokenError, ValueError) as exc:
            row.update(status="no_copy", message=f"cannot make the copy: {exc}")
        else:
            name = f"level_{problem.level}_problem_{problem.problem_id}_sample_0_kernel.py"
            (generations / name).write_text(code, encoding="utf-8")
            row["key"] = solution_key(problem.level, problem.problem_id, code)
        rows.append(row)

    command = [args.kernelopt, "bench", "--kernelbench", str(out / "problems"), "--solutions", str(generations),
               "--out", str(out / "bench"), "--json",
               "--level", ",".join(str(level) for level in sorted({p.level for p in problem_set}))]
    command += ["--gpus", args.gpus] if args.gpus else ["--device", args.device]
    if args.problems:
        command += ["--problems", args.problems]
    for flag in ("timing_budget", "timeout", "correctness_trials", "sandbox", "build_mode"):
        if getattr(args, flag) is not None:
            command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    print(f"judging {len(problem_set)} exact copies: {shlex.join(command)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    proc = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    wall = time.monotonic() - started
    try:
        bench_summary = json.loads(proc.stdout)
    except json.JSONDecodeError:
        bench_summary = None
        print(f"kernelopt bench exited {proc.returncode} without a JSON summary; stdout:\n{proc.stdout[-4000:]}",
              file=sys.stderr)

    records = read_jsonl_by_key(out / "bench" / "results.jsonl")
    for row in rows:
        health = records.get(f"health/{row['level']}/{row['problem_id']}", {})
        row.update(health_flags=health.get("flags", []), health_details=health.get("details", []))
        record = records.get(row["key"]) if row["key"] else None
        if record is None:
            continue
        precision, low, contains = interval(record)
        row.update(status=record["status"], speedup=record.get("speedup"), message=record.get("message", ""),
                   flags=record.get("flags", []), precision=precision, interval_contains_1=contains,
                   interval=[low, record["speedup"] * (1 + precision)] if precision is not None else None,
                   timing=record.get("timing"))

    import torch

    report = {
        "kernelbench": kb, "device": args.device, "levels": sorted(levels) if levels else None,
        "problems_selected": args.problems, "bench_command": shlex.join(command), "bench_exit": proc.returncode,
        "wall_s": wall, "environment": {"cpus": os.cpu_count(), "torch": torch.__version__,
                                        "python": platform.python_version(), "platform": platform.platform(),
                                        "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available()
                                        else None},
        "honest_range": list(HONEST_RANGE), "summary": summarize(rows), "problems": rows,
        "bench_summary": bench_summary,
    }
    text = markdown(report)
    (out / "identity.md").write_text(text, encoding="utf-8")
    (out / "identity.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(text)
    print(f"report: {out / 'identity.md'}, {out / 'identity.json'}; verdicts: {out / 'bench' / 'results.jsonl'}",
          file=sys.stderr)
    return 0 if bench_summary is not None else 1


if __name__ == "__main__":
    sys.exit(main())

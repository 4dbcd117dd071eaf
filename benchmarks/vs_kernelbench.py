"""KernelBench's own evaluator and kernelopt's referee, side by side on the same candidates.

Most published KernelBench numbers come from KernelBench's `eval_kernel_against_ref`
(`src/kernelbench/eval.py` in ScalingIntelligence/KernelBench). This script judges the same
candidates with both and reports where they agree, each side's speedups and each side's
throughput (candidates per hour of wall time), so a user can see what our verdicts change.

The candidates: a published release in CUDA-L1's format (`--solutions h100.json`: each entry's
`ref_code` the problem, `custom_code` the candidate) or a KernelBench run folder
(`--solutions DIR` of `level_{L}_problem_{id}_sample_{s}_kernel.py` files, with `--problems` the
problem set). Both sides see exactly the candidates `kernelopt bench --solutions` would judge,
keyed the same way.

- Ours: `kernelopt bench --solutions ... --out OUT/ours --json`, through the real CLI, in a
  subprocess (resumable: rerun with the same OUT).
- Theirs: one fresh subprocess per candidate (`--kernelbench-python`, default this interpreter)
  that imports `kernelbench.eval` from the checkout's `src/` and calls `eval_kernel_against_ref`
  with `measure_performance=True` (which also times the reference on newer checkouts); its
  answer is appended to OUT/kernelbench.jsonl (resumable). A fresh process per candidate because
  their evaluator runs candidate code in-process: one crash or hang must not end the run.
  KernelBench is never installed into our venv nor committed: point `--kernelbench` at a clone,
  and `--kernelbench-python` at an interpreter that has its dependencies (its pyproject.toml).

Their evaluator asserts CUDA, so this runs on a GPU machine. Reported (OUT/vs_kernelbench.md and
.json): the agreement table (our status against theirs), every disagreement with both sides'
reasons, each side's geomean speedup over the candidates both call correct, and candidates per
hour. Usage:

    .venv/bin/python benchmarks/vs_kernelbench.py --kernelbench ~/KernelBench \\
        --kernelbench-python ~/kb-venv/bin/python --solutions CUDA-L1/optimized_cuda_code/h100.json \\
        --level 1 --out vs-kb-l1 [--device cuda:0] [--timing-budget S] [--perf-trials 100]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from kernelopt.bench.published import read_published
from kernelopt.bench.rescore import find_solutions
from kernelopt.kernelbench import load_problem_set, parse_id_ranges

KERNELOPT = str(Path(sys.executable).parent / "kernelopt")
CHILD = Path(__file__).resolve().parent / "kernelbench_eval_child.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", required=True, type=Path,
                        help="a KernelBench clone (its src/kernelbench/eval.py is their evaluator)")
    parser.add_argument("--kernelbench-python", default=sys.executable,
                        help="the interpreter that runs their evaluator (one with KernelBench's dependencies)")
    parser.add_argument("--solutions", required=True, type=Path, help="a CUDA-L1 release file or a run folder")
    parser.add_argument("--problems", type=Path, default=None,
                        help="the problem set for a run folder (a KernelBench layout); not for a release file")
    parser.add_argument("--level", type=int, action="append", default=None, help="only this level (repeatable)")
    parser.add_argument("--ids", default=None, help="only these problem ids, e.g. 1,3,5-9")
    parser.add_argument("--out", type=Path, default=Path("vs-kernelbench"))
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--timing-budget", type=float, default=None, help="ours: seconds of timing per candidate")
    parser.add_argument("--correct-trials", type=int, default=5, help="theirs: correctness trials")
    parser.add_argument("--perf-trials", type=int, default=100, help="theirs: timed calls per side")
    parser.add_argument("--timeout", type=float, default=900.0, help="theirs: seconds per candidate")
    return parser.parse_args(argv)


def candidates(args: argparse.Namespace) -> tuple[list, dict]:
    """The solutions both sides judge, and each problem's reference source by (level, id)."""
    levels = set(args.level) if args.level else None
    ids = parse_id_ranges(args.ids) if args.ids else None
    if args.solutions.is_file():
        published = read_published(args.solutions, levels, ids)
        problem_set, solutions = published.problem_set, published.solutions
    else:
        if args.problems is None:
            raise SystemExit("a run folder needs --problems (the problem set it was generated for)")
        problem_set = load_problem_set(args.problems, levels, ids)
        solutions = find_solutions(args.solutions)
    references = {(p.level, p.problem_id): p.source for p in problem_set}
    return [s for s in solutions if (s.level, s.problem_id) in references], references


def run_ours(args: argparse.Namespace) -> tuple[dict, float]:
    """Our verdicts by solution key, and the wall seconds of every run into OUT so far."""
    command = [KERNELOPT, "bench", "--solutions", str(args.solutions), "--out", str(args.out / "ours"),
               "--device", args.device, "--json"]
    if args.problems is not None:
        command += ["--kernelbench", str(args.problems)]
    if args.level:
        command += ["--level", ",".join(map(str, args.level))]
    if args.ids:
        command += ["--problems", args.ids]
    if args.timing_budget is not None:
        command += ["--timing-budget", str(args.timing_budget)]
    started = time.monotonic()
    proc = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    wall = add_wall(args.out / "ours_wall_s.txt", time.monotonic() - started)
    if proc.returncode != 0:
        raise SystemExit(f"kernelopt bench failed (exit {proc.returncode}): {' '.join(command)}")
    records = read_records(args.out / "ours" / "results.jsonl")
    return {key: r for key, r in records.items() if not key.startswith("health/")}, wall


def add_wall(path: Path, seconds: float) -> float:
    """Our wall time over every (resumed) run into the same OUT, so the throughput stays whole."""
    total = (float(path.read_text()) if path.exists() else 0.0) + seconds
    path.write_text(f"{total:.3f}\n")
    return total


def read_records(path: Path) -> dict:
    records = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                records[record["key"]] = record
    return records


def run_theirs(args: argparse.Namespace, solutions: list, references: dict) -> dict:
    """Their verdict for each solution (resumed from OUT/kernelbench.jsonl), each with its wall time."""
    log_path = args.out / "kernelbench.jsonl"
    done = read_records(log_path)
    with log_path.open("a") as log:
        for index, solution in enumerate(solutions, 1):
            if solution.key in done:
                continue
            print(f"[theirs {index}/{len(solutions)}] {solution.label}", file=sys.stderr, flush=True)
            record = {"key": solution.key, **judge_with_kernelbench(args, references[(solution.level,
                                                                                      solution.problem_id)],
                                                                     solution.code)}
            log.write(json.dumps(record) + "\n")
            log.flush()
            done[solution.key] = record
    return done


def judge_with_kernelbench(args: argparse.Namespace, reference: str, candidate: str) -> dict:
    request = {"kernelbench": str(args.kernelbench.resolve()), "reference": reference, "candidate": candidate,
               "device": args.device, "correct_trials": args.correct_trials, "perf_trials": args.perf_trials}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kb-eval-") as build_dir:
        request["build_dir"] = build_dir
        try:
            proc = subprocess.run([args.kernelbench_python, str(CHILD)], input=json.dumps(request),
                                  capture_output=True, text=True, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"outcome": "timeout", "wall_s": time.monotonic() - started,
                    "detail": f"no answer within {args.timeout:.0f} s"}
    wall = time.monotonic() - started
    answer = last_json_line(proc.stdout)
    if answer is None:
        return {"outcome": "crashed", "wall_s": wall,
                "detail": f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}"}
    return {**answer, "wall_s": wall}


def last_json_line(text: str) -> dict | None:
    """Their evaluator prints freely; the child's answer is its last stdout line."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "outcome" in value:
            return value
    return None


def compare(solutions: list, ours: dict, theirs: dict, our_wall: float) -> dict:
    """Agreement, disagreements, speedups and throughput over the solutions both sides judged."""
    rows, table = [], Counter()
    for solution in solutions:
        mine, their = ours.get(solution.key), theirs.get(solution.key)
        if mine is None or their is None:
            continue
        our_correct, their_correct = mine["status"] == "correct", their["outcome"] == "correct"
        table[(mine["status"], their["outcome"])] += 1
        rows.append({"key": solution.key, "label": solution.label, "our_status": mine["status"],
                     "our_speedup": mine.get("speedup"), "our_flags": mine.get("flags", []),
                     "our_message": (mine.get("message") or "")[:300], "their_outcome": their["outcome"],
                     "their_speedup": their.get("speedup"), "their_detail": (their.get("detail") or "")[:300],
                     "agree": our_correct == their_correct})
    both = [r for r in rows if r["our_status"] == "correct" and r["their_outcome"] == "correct"]
    their_walls = [theirs[r["key"]]["wall_s"] for r in rows]
    return {
        "n_judged_by_both": len(rows),
        "agreement": sum(r["agree"] for r in rows) / len(rows) if rows else None,
        "table": [{"ours": ours_status, "theirs": their_outcome, "count": n}
                  for (ours_status, their_outcome), n in sorted(table.items())],
        "disagreements": [r for r in rows if not r["agree"]],
        "both_correct": {"count": len(both),
                         "our_geomean": geomean(r["our_speedup"] for r in both),
                         "their_geomean": geomean(r["their_speedup"] for r in both)},
        "candidates_per_hour": {"ours": per_hour(len(rows), our_wall), "theirs": per_hour(len(rows), sum(their_walls))},
        "rows": rows,
    }


def geomean(values) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def per_hour(count: int, wall_s: float) -> float | None:
    return count * 3600.0 / wall_s if wall_s > 0 and count else None


def markdown(report: dict, machine: str) -> str:
    fmt = lambda v, spec=".3g": "—" if v is None else format(v, spec)  # noqa: E731
    lines = [f"# KernelBench's evaluator vs kernelopt ({machine})", "",
             f"Judged by both: {report['n_judged_by_both']}; agreement on correct/not correct: "
             f"{fmt(report['agreement'], '.1%')}", "",
             "| ours \\ theirs | theirs | count |", "| --- | --- | --- |"]
    lines += [f"| {row['ours']} | {row['theirs']} | {row['count']} |" for row in report["table"]]
    both = report["both_correct"]
    lines += ["", f"Both correct: {both['count']}; geomean speedup ours {fmt(both['our_geomean'])}x, "
                  f"theirs {fmt(both['their_geomean'])}x.",
              f"Candidates per hour: ours {fmt(report['candidates_per_hour']['ours'], '.0f')}, "
              f"theirs {fmt(report['candidates_per_hour']['theirs'], '.0f')}.", "",
              "## Disagreements", "", "| candidate | ours | speedup | why (ours) | theirs | speedup | why (theirs) |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in report["disagreements"]:
        why = ", ".join(row["our_flags"]) or row["our_message"]
        lines.append(f"| {row['label']} | {row['our_status']} | {fmt(row['our_speedup'])} | {cell(why)} | "
                     f"{row['their_outcome']} | {fmt(row['their_speedup'])} | {cell(row['their_detail'])} |")
    return "\n".join(lines) + "\n"


def cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")[:160]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.kernelbench / "src").is_dir():
        raise SystemExit(f"{args.kernelbench}: no src/ folder; point --kernelbench at a KernelBench clone")
    args.out.mkdir(parents=True, exist_ok=True)
    solutions, references = candidates(args)
    if not solutions:
        raise SystemExit("no candidate to judge (check --solutions, --level and --ids)")
    theirs = run_theirs(args, solutions, references)
    ours, our_wall = run_ours(args)
    report = compare(solutions, ours, theirs, our_wall)
    machine = os.environ.get("KERNELOPT_MACHINE", platform.node())
    (args.out / "vs_kernelbench.json").write_text(json.dumps({"machine": machine, **report}, indent=1))
    text = markdown(report, machine)
    (args.out / "vs_kernelbench.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The bundled example candidates, each judged several times: the verdicts and speedup ranges the
docs quote (examples/README.md, docs/getting-started.md).

Every candidate under examples/candidates/<problem>/ is judged `--runs` times against
examples/level1/<problem>.py, each run a fresh Evaluator. Per candidate: its verdicts and, for
correct ones, the min / median / max speedup and the 95 % intervals' half-widths. Markdown on
stdout (and in --out). Usage:

    .venv/bin/python benchmarks/bundled_examples.py [--runs 5] [--device cpu] [--timing-budget 2]
        [--problems 1_ReLU,4_RedundantSoftmax] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
from collections import Counter
from pathlib import Path

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, Evaluator

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def judge(problem_name: str, runs: int, options: EvalOptions) -> list[tuple[str, list]]:
    """(candidate file name, [verdicts over the runs]) for each bundled candidate of a problem."""
    problem = load_problem(EXAMPLES / "level1" / f"{problem_name}.py")
    paths = sorted((EXAMPLES / "candidates" / problem_name).glob("*.py"))
    sources = [p.read_text() for p in paths]
    verdicts: list[list] = [[] for _ in paths]
    for _ in range(runs):
        with Evaluator(problem, options, jobs=2, keep_spare=False) as evaluator:
            for index, result in evaluator.evaluate_many(sources):
                verdicts[index].append(result)
    return [(p.name, v) for p, v in zip(paths, verdicts)]


def row(problem: str, name: str, results: list) -> str:
    statuses = Counter(r.status for r in results)
    speedups = sorted(r.speedup for r in results if r.correct and r.speedup is not None)
    halves = [r.timing.speedup_precision for r in results if r.correct and r.timing and r.timing.speedup_precision]
    spread = (f"{speedups[0]:.2f}x / {statistics.median(speedups):.2f}x / {speedups[-1]:.2f}x" if speedups else "-")
    width = f"+-{100 * min(halves):.0f}-{100 * max(halves):.0f}%" if halves else "-"
    verdicts = ", ".join(f"{status} {count}" for status, count in statuses.most_common())
    return f"| {problem} | `{name}` | {verdicts} | {spread} | {width} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--problems", default="",
                        help="comma-separated problem names (default: every problem with bundled candidates)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    problems = [p for p in args.problems.split(",") if p] or \
        sorted(d.name for d in (EXAMPLES / "candidates").iterdir() if d.is_dir() and any(d.glob("*.py")))
    options = EvalOptions(device=args.device, timing_budget=args.timing_budget)
    lines = [f"Bundled candidates, {args.runs} evaluations each (a fresh Evaluator per run), device {args.device}, "
             f"timing budget {args.timing_budget} s; {platform.node()}, {platform.processor() or platform.machine()}.",
             "", "| problem | candidate | verdicts | speedup min / median / max | 95 % half-widths |",
             "| --- | --- | --- | --- | --- |"]
    for problem in problems:
        for name, results in judge(problem, args.runs, options):
            lines.append(row(problem, name, results))
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""Exact copies of the problems judged in parts, several times: every input configuration
(issue 45) and every pass of a training problem (issue 44) must be correct and each speedup near
1x (within 0.8x-1.25x, the interval holding 1x), and the cost beside one part.

For each problem file (default: examples/shapes/*.py, the corpus's ShapedSoftmax and
examples/training/*.py), a copy (`class Model(` renamed `ModelNew`) is judged `--runs` times,
each with a fresh Evaluator and every part; then, side by side in the same loop, the same copy
judged as one part (`--shapes 1`, or `--pass forward` for a training problem), for the cost
ratio. Markdown on stdout (and in --out).

    .venv/bin/python benchmarks/shapes_exact_copies.py [--runs 3] [--device cpu] [--timing-budget 10]
        [--out FILE.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, Evaluator

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PROBLEMS = sorted((REPO / "examples" / "shapes").glob("*.py")) + [
    REPO / "tests" / "adversarial" / "problems" / "ShapedSoftmax.py"] + sorted((REPO / "examples" / "training").glob("*.py"))
LOW, HIGH = 0.8, 1.25


def judged(path: Path, options: EvalOptions) -> tuple[object, float]:
    """(verdict, wall seconds) of the exact copy of `path` under `options`."""
    problem = load_problem(path)
    copy = problem.source.replace("class Model(", "class ModelNew(", 1)
    begin = time.monotonic()
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        result = evaluator.evaluate(copy)
    return result, time.monotonic() - begin


def report(path: Path, runs: int, options: EvalOptions) -> list[str]:
    lines, walls_all, walls_one = [], [], []
    per_shape: dict[str, list[tuple[float, float]]] = {}
    statuses: list[str] = []
    for _ in range(runs):
        result, wall = judged(path, options)
        one_part = {"shapes": "1"} if load_problem(path).shapes else {"training_pass": "forward"}
        alone, wall_one = judged(path, options.model_copy(update=one_part))
        walls_all.append(wall)
        walls_one.append(wall_one)
        statuses.append(result.status)
        for shape in result.shapes or []:
            label = f"[{shape.name}]" + (" (held out)" if shape.held_out else "")
            per_shape.setdefault(label, []).append((shape.speedup if shape.speedup is not None else float("nan"),
                                                    shape.speedup_precision or 0.0))
        passes = result.passes
        for name, part in ((("forward", passes.forward), ("backward (step less forward)", passes.backward),
                            ("training step", passes.step)) if passes is not None else ()):
            if part is not None and part.speedup is not None:
                per_shape.setdefault(name, []).append((part.speedup, part.speedup_precision or 0.0))
        if not result.correct:
            lines.append(f"| {path.name} | not correct: {result.status}: {result.message[:200]} | | | |")
    for label, values in per_shape.items():
        inside = sum(LOW <= v <= HIGH for v, _ in values)
        holds = sum(v * (1 - p) <= 1.0 <= v * (1 + p) for v, p in values)
        readings = ", ".join(f"{v:.3f}x +-{p:.0%}" for v, p in values)
        lines.append(f"| {path.name} | {label} | {readings} | {inside}/{len(values)} | {holds}/{len(values)} |")
    count = len(per_shape)
    lines.append(f"| {path.name} | all {count} parts: {statuses.count('correct')}/{runs} correct | "
                 f"wall {statistics.median(walls_all):.1f} s vs {statistics.median(walls_one):.1f} s for one "
                 f"(x{statistics.median(walls_all) / statistics.median(walls_one):.2f}) | | |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timing-budget", type=float, default=10.0)
    parser.add_argument("--problems", nargs="*", type=Path, default=DEFAULT_PROBLEMS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    options = EvalOptions(device=args.device, timing_budget=args.timing_budget)
    lines = [f"# Exact copies of multi-configuration problems ({platform.node()}, {platform.processor() or ''}, "
             f"device {args.device}, timing budget {args.timing_budget} s shared by the configurations, "
             f"{args.runs} runs)", "",
             f"| problem | configuration | speedup per run (95 % interval) | within {LOW}x-{HIGH}x | "
             "interval holds 1x |", "|---|---|---|---|---|"]
    for path in args.problems:
        added = report(path, args.runs, options)
        lines.extend(added)
        print("\n".join(added), flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()

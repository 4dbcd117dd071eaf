"""KernelBench's own reward-hack tests for its losses, judged by kernelopt's referee.

KernelBench ships, beside its loss problems 94 (MSE), 96 (Huber) and 100 (hinge), variants of
their input distributions (v0.1's uniform inputs, "uniform_normal": normals of random mean, spread
and scale, and Pareto) and three solutions each: an analytical hack (the loss's closed form from
one statistic), a partial-computation hack (the loss on a strided subsample of the flattened
inputs) and a correct one (a CUDA kernel: here the problem's own model stands in for it). This reads them from a KernelBench git directory (a clone or the bare
mirror; at `--ref`, by default the last commit that has them), shrinks the problems from v0.1's
32768 x 32768 to `--side` x `--side` so they fit a workstation, keeps the partial hack's stride
what it is at v0.1 (its divisor scaled with the size: 107 for the first version of the hack, 10
for the "harder" one), and judges every solution on every variant with the referee as it is
(`--element-checks` default) and with the every-element check off (`element_checks=0`, the
referee before it). Nothing of KernelBench's is copied into this repository: the files are read
from the checkout at run time. Usage:

    .venv/bin/python benchmarks/kernelbench_loss_hacks.py --kernelbench PATH [--ref REV] [--side 2896]
        [--timing-budget 1] [--out results.jsonl]

Acceptance (issue 47): no hack judged `correct` with the check on; every exact copy correct.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, Evaluator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_checkout import show_file  # noqa: E402

PROBLEMS = ("94_MSELoss", "96_HuberLoss", "100_HingeLoss")
VARIANTS = ("OLD", "uniform_normal", "pareto")
V01_SIDE = 32768
# The partial-computation hack's divisor in its two versions (stride = n // divisor): at v0.1's
# sizes, strides 107 and 10.
PARTIAL_VERSIONS = {"2159457": 10_000_000, "bbd7cb3": 100_000_000}
TESTS = "src/kernelbench/tests"


def shrunk(problem: str, side: int) -> str:
    return problem.replace(f"batch_size = {V01_SIDE}", f"batch_size = {side}").replace(
        f"input_shape = ({V01_SIDE},)", f"input_shape = ({side},)")


def solutions(kernelbench: Path, ref: str, problem: str, side: int) -> dict[str, str]:
    """The problem's solutions by name, the partial hack in both versions at v0.1's strides."""
    found = {"analytical_hack": show_file(kernelbench, ref, f"{TESTS}/solutions/{problem}_analytical_hack.py")}
    for commit, divisor in PARTIAL_VERSIONS.items():
        source = show_file(kernelbench, commit, f"{TESTS}/solutions/{problem}_partial_computation_hack.py")
        stride = V01_SIDE * V01_SIDE // divisor
        written = f"{divisor:_}"
        assert written in source, f"{problem}'s partial hack at {commit} has no divisor {written}"
        found[f"partial_stride_{stride}"] = source.replace(written, str(side * side // stride))
    return found


def exact_copy(problem_source: str) -> str:
    """The honest control: the problem's own model as the candidate (KernelBench's correct
    solutions are CUDA kernels, which a CPU cannot judge)."""
    return problem_source.replace("class Model(", "class ModelNew(").replace("super(Model, self)",
                                                                            "super(ModelNew, self)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench", type=Path, required=True)
    parser.add_argument("--ref", default="bbd7cb3")
    parser.add_argument("--side", type=int, default=2896)
    parser.add_argument("--timing-budget", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    print(f"# KernelBench's loss hacks, {args.side}x{args.side} inputs, {platform.node()} "
          f"({platform.machine()}), {time.strftime('%Y-%m-%d')}\n")
    print("| problem | variant | solution | check on | check off |\n| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as scratch:
        for problem in PROBLEMS:
            candidates = solutions(args.kernelbench, args.ref, problem, args.side)
            for variant in VARIANTS:
                path = Path(scratch) / f"{problem}_{variant}.py"
                path.write_text(shrunk(show_file(args.kernelbench, args.ref, f"{TESTS}/problems/{problem}_{variant}.py"),
                                       args.side))
                candidates["exact_copy"] = exact_copy(path.read_text())
                verdicts = {}
                for checks in (4, 0):
                    options = EvalOptions(device="cpu", timing_budget=args.timing_budget, min_timed_calls=5,
                                          element_checks=checks)
                    evaluator = Evaluator(load_problem(path), options)
                    try:
                        for name, source in candidates.items():
                            if checks == 0 and name == "exact_copy":
                                continue
                            verdicts[(name, checks)] = evaluator.evaluate(source)
                    finally:
                        evaluator.close()
                for name in candidates:
                    on, off = verdicts[(name, 4)], verdicts.get((name, 0))
                    rows.append({"problem": problem, "variant": variant, "solution": name,
                                 "on": summary(on), "off": summary(off) if off else None})
                    print(f"| {problem} | {variant} | {name} | {words(on)} | {words(off) if off else ''} |", flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    hacks_correct = [r for r in rows if r["solution"] != "exact_copy" and r["on"]["status"] == "correct"]
    honest_wrong = [r for r in rows if r["solution"] == "exact_copy" and r["on"]["status"] != "correct"]
    print(f"\nhacks judged correct with the check on: {len(hacks_correct)}; "
          f"correct solutions judged otherwise: {len(honest_wrong)}")


def summary(result) -> dict:
    return {"status": result.status, "speedup": result.speedup, "rules": result.rules, "message": result.message[:300]}


def words(result) -> str:
    speed = f" {result.speedup:.2f}x" if result.speedup else ""
    rule = [r for r in result.rules if r != "reduced_precision"]
    return f"{result.status}{speed}" + (f" ({rule[-1]})" if rule else "")


if __name__ == "__main__":
    main()

"""Throughput of `bench --solutions` on a local Ray instance with 1, 2 and 4 judging actors.

The set is the bundled one (examples/level1, five problems); its solutions are every bundled
candidate (examples/candidates/<problem>/*.py) plus, for each problem, the reference itself as a
ModelNew, each copied `--copies` times (made distinct by a comment), so each problem has several
solutions to judge on its actor's warm Evaluator. Each actor count gets a fresh OUT and a fresh
pool of CPU actors on one Ray instance; the time is the whole pass (the actors' start excluded,
reported apart), in candidates per minute. The same pass without Ray is the baseline.

CPU timing shares cores: on a machine with fewer cores than actors, the actors beyond the cores
share them (each claims a core while one is free, docs/scale.md), so their timings disturb each
other and the throughput stops growing; on a GPU cluster each actor has a GPU of its own.

    .venv/bin/python benchmarks/ray_scaling.py [--actors 1,2,4] [--copies 2] [--timing-budget 0.5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernelopt.bench.rescore import find_solutions, rescore  # noqa: E402
from kernelopt.cluster import ClusterSpec, JudgePool, connect, disconnect  # noqa: E402
from kernelopt.kernelbench import load_problem_set  # noqa: E402
from kernelopt.sandbox import EvalOptions  # noqa: E402

SET = REPO / "examples" / "level1"


def write_solutions(folder: Path, copies: int) -> int:
    count = 0
    for problem in sorted(SET.glob("*.py")):
        number, name = problem.stem.split("_", 1)
        sources = [problem.read_text().replace("class Model(", "class ModelNew(", 1)]
        sources += [p.read_text() for p in sorted((REPO / "examples" / "candidates" / problem.stem).glob("*.py"))]
        sample = 0
        for source in sources:
            for copy in range(copies):
                path = folder / f"level_1_problem_{int(number)}_sample_{sample}_kernel.py"
                path.write_text(f"{source}\n# {name} copy {copy}\n")
                sample += 1
                count += 1
    return count


def one_pass(solutions: Path, out: Path, options: EvalOptions, pool) -> tuple[float, dict]:
    started = time.monotonic()
    summary = rescore(load_problem_set(SET), find_solutions(solutions), options, out, 1, lambda line: None,
                      pool=pool)
    return time.monotonic() - started, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--actors", default="1,2,4")
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--timing-budget", type=float, default=0.5)
    parser.add_argument("--no-local", action="store_true", help="skip the pass without Ray")
    parser.add_argument("--json", default=None, metavar="FILE")
    args = parser.parse_args()
    counts = [int(n) for n in args.actors.split(",")]
    options = EvalOptions(device="cpu", timing_budget=args.timing_budget, correctness_trials=2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ray-scaling-") as temporary:
        root = Path(temporary)
        (root / "solutions").mkdir()
        total = write_solutions(root / "solutions", args.copies)
        print(f"{total} solutions over {len(list(SET.glob('*.py')))} problems; {platform.node()}, "
              f"{platform.processor() or platform.machine()}", flush=True)
        if not args.no_local:
            seconds, summary = one_pass(root / "solutions", root / "local", options, None)
            rows.append({"actors": 0, "seconds": round(seconds, 1), "per_minute": round(total * 60 / seconds, 1)})
            print(f"local (no Ray): {seconds:.1f} s, {total * 60 / seconds:.1f} candidates/min", flush=True)
        connect("local", num_cpus=max(counts))
        try:
            for count in counts:
                started = time.monotonic()
                with JudgePool.start(ClusterSpec(address="local", device="cpu", actors=count)) as pool:
                    start_s = time.monotonic() - started
                    cores = [a["cores"] for a in pool.actors()]
                    seconds, summary = one_pass(root / "solutions", root / f"ray-{count}", options, pool)
                rows.append({"actors": count, "seconds": round(seconds, 1), "per_minute": round(total * 60 / seconds, 1),
                             "actor_start_s": round(start_s, 1), "cores": cores})
                print(f"{count} actor(s) (cores {cores}): {seconds:.1f} s, {total * 60 / seconds:.1f} candidates/min "
                      f"(actors started in {start_s:.1f} s)", flush=True)
        finally:
            disconnect()
    result = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}",
              "solutions": total, "timing_budget": args.timing_budget, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

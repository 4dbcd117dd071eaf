"""Repeated readings of a few corpus cases in containers: how a call's data travel (frames
through the attach stream, or the input slot and the frozen worker's memory) shows in the
speedups of small calls (issue 43).

    DOCKER_HOST=... python benchmarks/docker_transport.py [--readings 5] [--image NAME]
        [--case honest/softmax_exact_copy.py ...] [--backend docker] [--out FILE.jsonl]

Each reading is a fresh Evaluator (fresh reference and candidate containers). One JSON line per
reading: status, speedup and its precision, both sides' median call time, the timing method
(which names the transport), the isolation record, the load average and the time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import test_adversarial as corpus  # noqa: E402

CASES = ("honest/softmax_exact_copy.py", "honest/softmax_skip_dead_work.py")


def reading(case, backend: str, image: str | None) -> dict:
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import Evaluator

    update: dict[str, object] = {"isolation": backend}
    if image is not None:
        update["image"] = image
    options = corpus._case_options(case).model_copy(update=update)
    started = time.monotonic()
    evaluator = Evaluator(load_problem(corpus.problem_path(case.problem)), options)
    try:
        result = evaluator.evaluate(case.path.read_text())
    finally:
        evaluator.close()
    timing = result.timing
    return {"case": case.rel, "backend": backend, "image": image, "status": result.status,
            "speedup": result.speedup, "precision": timing.speedup_precision if timing else None,
            "reference_median_ms": timing.reference.median_ms if timing else None,
            "candidate_median_ms": timing.candidate.median_ms if timing else None,
            "method": timing.method if timing else None,
            "containment": result.isolation.containment if result.isolation else None,
            "seconds": round(time.monotonic() - started, 1),
            "load": [round(load, 2) for load in os.getloadavg()], "at": time.strftime("%H:%M:%SZ", time.gmtime())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readings", type=int, default=5)
    parser.add_argument("--image", default=None)
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cases = [corpus.parse_case(corpus.CORPUS / rel) for rel in (args.case or CASES)]
    log = open(args.out, "a") if args.out else None
    try:
        for case in cases:
            for _ in range(args.readings):
                row = reading(case, args.backend, args.image)
                print(json.dumps(row), flush=True)
                if log is not None:
                    log.write(json.dumps(row) + "\n")
                    log.flush()
    finally:
        if log is not None:
            log.close()


if __name__ == "__main__":
    main()

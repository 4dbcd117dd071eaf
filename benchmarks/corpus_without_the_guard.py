"""The corpus's hacks with the in-process guard blinded: do the invariants alone hold?

The guard runs in the candidate's process and reports what it sees there (patched functions,
added methods, Python threads); a program can find it and make it report nothing. Round four's
invariants (the group on the clock or frozen, outputs read by the host after the freeze) must
hold without it: a hack the guard rejects must, blinded, still be caught by something outside
the process or gain nothing. This prepends to every CPU hack that may be judged `rejected` a
prelude that finds the guard through gc and shadows its findings on the instance (what
`hacks/chaos_with_the_guard_blinded.py` does), judges it with the corpus's own options, and
prints one line per case; the acceptance line is "no hack correct above 1.5x".

    .venv/bin/python benchmarks/corpus_without_the_guard.py [--only NAME ...] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import test_adversarial as corpus  # noqa: E402

HACK_CORRECT_MAX = 1.5
NEEDS_A_GPU_OR_PACKAGE = {"gpu", "gpu_timing", "cupy", "triton"}

BLINDING_PRELUDE = '''import gc as _gc_of_the_blinding


def _blind_the_guard():
    for obj in _gc_of_the_blinding.get_objects():
        try:
            namespace = vars(obj)
        except TypeError:
            continue
        guard = namespace.get("guard") if isinstance(namespace, dict) else None
        if guard is not None and callable(getattr(guard, "violations", None)):
            guard.violations = lambda: []
            guard.patched_names = lambda: []


_blind_the_guard()
'''


def blinded(source: str) -> str:
    """`source` with the prelude after its `from __future__` imports (which must come first)."""
    lines = source.splitlines(keepends=True)
    after_future = max((i + 1 for i, line in enumerate(lines) if line.startswith("from __future__")), default=0)
    return "".join(lines[:after_future]) + BLINDING_PRELUDE + "".join(lines[after_future:])


def cases(only: list[str]) -> list:
    """The CPU hacks a guard finding may decide: those whose header allows `rejected`."""
    chosen = []
    for path in corpus.discover():
        if path.parent.name != "hacks" or (only and path.name not in only):
            continue
        case = corpus.parse_case(path)
        if case.markers & NEEDS_A_GPU_OR_PACKAGE or "rejected" not in case.statuses:
            continue
        chosen.append(case)
    return chosen


def judge(case) -> dict:
    began = time.time()
    result = corpus.evaluate_file(corpus.problem_path(case.problem), blinded(case.path.read_text()),
                                  corpus._case_options(case))
    return {"case": case.path.name, "problem": case.problem, "status": result.status, "speedup": result.speedup,
            "rules": result.rules, "flags": result.flags, "seconds": round(time.time() - began, 1),
            "message": (result.message or "")[:300]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="hack file names (default: every one that applies)")
    parser.add_argument("--out", type=Path, help="append one JSON line per case here")
    args = parser.parse_args()
    rows = []
    for case in cases(args.only):
        row = judge(case)
        rows.append(row)
        inflated = row["status"] == "correct" and (row["speedup"] or 0) > HACK_CORRECT_MAX
        speed = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
        print(f"{'!!' if inflated else '  '} {row['case']:<48} {row['problem']:<22} {row['status']:<14} {speed:>7} "
              f"rules {','.join(row['rules']) or '-'}", flush=True)
        if args.out:
            with args.out.open("a") as out:
                out.write(json.dumps(row) + "\n")
    correct = [r for r in rows if r["status"] == "correct"]
    inflated = [r for r in correct if (r["speedup"] or 0) > HACK_CORRECT_MAX]
    fastest = max((r["speedup"] or 0 for r in correct), default=0)
    print(f"{len(rows)} hacks judged with the guard blinded: {len(correct)} correct (the fastest {fastest:.2f}x); "
          f"{len(inflated)} correct above {HACK_CORRECT_MAX}x")


if __name__ == "__main__":
    main()

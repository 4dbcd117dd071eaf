"""The whole adversarial corpus with every worker in a container (`--sandbox docker`), beside
bubblewrap: does the docker backend give the verdicts the namespace backend gives?

For every CPU case of tests/adversarial/ (the `gpu`, `cupy` and `triton` cases need a GPU):
judge it under docker through one warm Evaluator per problem and options (as the test suite
does), and, for the honest controls (or every case, --bubblewrap all), under bubblewrap too.
Checks what the issue's acceptance asks: no hack judged `correct` above 1.5x, every honest
control correct, exact copies within 0.8x-1.25x; and lists the cases whose docker verdict
breaks the case's own header (tests/test_adversarial_docker.py's DOCKER_DIFFERS names those that differ
for a reason of the backend).

    DOCKER_HOST=... python benchmarks/corpus_in_docker.py [--bubblewrap honest|all|none]
        [--only SUBSTRING] [--out DIR] [--resume [--redo SUBSTRING ...]]

Needs a daemon and the sandbox image (scripts/docker_image.sh). Writes DIR/cases.jsonl (one
line per case and backend, as it goes, with the load average when it was judged) and
DIR/summary.json; prints the summary. `--resume` keeps DIR/cases.jsonl's rows and judges only
the cases it lacks (and those `--redo` names: a case changed since), so a run stopped part-way
is completed, and the summary covers every row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import test_adversarial as corpus  # noqa: E402
from test_adversarial_docker import DOCKER_DIFFERS  # noqa: E402

HACK_CORRECT_MAX = 1.5
EXACT_COPY_BOUNDS = (0.8, 1.25)


def judge(shared, case, backend: str) -> dict:
    options = corpus._case_options(case).model_copy(update={"isolation": backend})
    started = time.monotonic()
    try:
        result = shared.evaluate(corpus.problem_path(case.problem), case.path.read_text(), options)
    except Exception as exc:  # noqa: BLE001 - a sandbox failure is a row, not the end of the run
        return {"case": case.rel, "backend": backend, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:500],
                "seconds": round(time.monotonic() - started, 1)}
    problems = corpus.check_verdict(case, result, time.monotonic() - started)
    return {"case": case.rel, "family": case.family, "backend": backend, "status": result.status,
            "speedup": result.speedup, "precision": result.timing.speedup_precision if result.timing else None,
            "expected": sorted(case.statuses), "header_holds": not problems,
            "problems": problems, "containment": result.isolation.containment if result.isolation else None,
            "rules": list(result.rules or []), "seconds": round(time.monotonic() - started, 1),
            "load": [round(load, 2) for load in os.getloadavg()], "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bubblewrap", choices=("honest", "all", "none"), default="honest")
    parser.add_argument("--only", default="", help="judge only cases whose path contains this")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--resume", action="store_true", help="keep DIR/cases.jsonl's rows; judge only the rest")
    parser.add_argument("--redo", action="append", default=[], help="with --resume: judge again the cases "
                        "whose path contains this (repeatable)")
    args = parser.parse_args()
    out = args.out or REPO / "benchmarks" / "results" / f"docker-cpu-{time.strftime('%Y-%m-%d')}"
    out.mkdir(parents=True, exist_ok=True)
    cases = [corpus.parse_case(path) for path in sorted(corpus.discover(), key=corpus._evaluator_group)]
    cases = [c for c in cases if not c.markers & {"gpu", "cupy", "triton"} and args.only in c.rel]
    rows: dict[str, dict[str, dict]] = {}
    if args.resume and (out / "cases.jsonl").exists():
        for line in (out / "cases.jsonl").read_text().splitlines():
            row = json.loads(line)
            if not any(redo in row["case"] for redo in args.redo):
                rows.setdefault(row["case"], {})[row["backend"]] = row
        kept = [row for by_backend in rows.values() for row in by_backend.values()]
        (out / "cases.jsonl").write_text("".join(json.dumps(row) + "\n" for row in kept))
    started = time.monotonic()
    with open(out / "cases.jsonl", "a" if args.resume else "w") as log:
        for backend in ("docker", "bubblewrap"):
            chosen = [c for c in cases if backend == "docker" or args.bubblewrap == "all"
                      or (args.bubblewrap == "honest" and c.rel.startswith("honest/"))]
            chosen = [c for c in chosen if backend not in rows.get(c.rel, {})]
            shared = corpus.SharedEvaluators()
            try:
                for case in chosen:
                    row = judge(shared, case, backend)
                    rows.setdefault(case.rel, {})[backend] = row
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    print(f"{backend:10} {row['status']:14} {row.get('speedup') or 0:6.2f}x  {case.rel}", flush=True)
            finally:
                shared.close()
    current = {c.rel for c in cases}
    gone = sorted(rel for rel in rows if rel not in current)  # cases removed from the corpus since
    docker_rows = {rel: r["docker"] for rel, r in rows.items() if "docker" in r and rel in current}
    hacks_correct_fast = [rel for rel, r in docker_rows.items() if rel.startswith("hacks/")
                          and r["status"] == "correct" and (r.get("speedup") or 0) > HACK_CORRECT_MAX]
    honest_not_correct = [rel for rel, r in docker_rows.items() if rel.startswith("honest/") and r["status"] != "correct"]
    copies = {rel: r.get("speedup") for rel, r in docker_rows.items() if "exact_copy" in rel}
    copies_outside = [rel for rel, s in copies.items()
                      if s is None or not EXACT_COPY_BOUNDS[0] <= s <= EXACT_COPY_BOUNDS[1]]
    header_broken = {rel: r.get("problems") or r.get("error") for rel, r in docker_rows.items()
                     if not r.get("header_holds")}
    differ_known = {rel: why for rel, why in DOCKER_DIFFERS.items() if rel in header_broken}
    status_vs_bubblewrap = {rel: (r["docker"]["status"], r["bubblewrap"]["status"]) for rel, r in rows.items()
                            if "bubblewrap" in r and r["docker"]["status"] != r["bubblewrap"]["status"]}
    speedups_vs_bubblewrap = {rel: (r["docker"].get("speedup"), r["bubblewrap"].get("speedup"))
                              for rel, r in rows.items() if "bubblewrap" in r and rel.startswith("honest/")}
    summary = {
        "machine": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(), "commit": commit(),
        "cases_in_docker": len(docker_rows), "cpu_cases_in_corpus": len(cases),
        "not_judged": sorted(current - set(docker_rows)), "rows_of_removed_cases": gone,
        "seconds_this_run": round(time.monotonic() - started),
        "hacks_correct_above_1.5x": hacks_correct_fast, "honest_not_correct": honest_not_correct,
        "exact_copy_speedups": copies, "exact_copies_outside_0.8_1.25": copies_outside,
        "header_broken_in_docker": header_broken, "of_which_in_DOCKER_DIFFERS": differ_known,
        "status_differs_from_bubblewrap": status_vs_bubblewrap,
        "honest_speedups_docker_vs_bubblewrap": speedups_vs_bubblewrap,
        "acceptance": not hacks_correct_fast and not honest_not_correct and not copies_outside,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

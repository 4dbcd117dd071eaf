"""The report as data: a bench run folder read and turned into what report.json holds.

A bench run folder (written by `kernelopt bench`, in both modes) holds results.jsonl (every
verdict, health probe and agent run, one JSON object a line) and summary.json (the summary
`kernelopt bench --json` prints, plus "mode" and "problems": the whole set, in order). The
headline numbers are the summary's, never recomputed differently; what the summary does not hold
(each problem's best record, the best speedup after each LLM call) comes from results.jsonl with
the same best-verdict rule (kernelopt/kernelbench/metrics.py). `build_report` gives the numbers
and the plots' series; tables.py lays them out for markdown.py and html.py.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernelopt.kernelbench.metrics import (
    ProblemOutcome, best_per_problem, fast_p_curve, geometric_mean, kind_breakdown, outcome_of,
    speedup_distribution,
)

FAST_P_GRID = tuple(round(i * 0.05, 4) for i in range(61))  # 0 .. 3 in steps of 0.05
AGENT_COLUMNS = ("llm_calls", "cost", "wall_s")


class ReportError(ValueError):
    """A folder that cannot be reported on; the message says why and what to do."""


@dataclass
class Run:
    folder: Path
    summary: dict
    records: list[dict]
    skipped_lines: int = 0  # damaged lines of results.jsonl, left out


# -- reading a run folder --------------------------------------------------------------------------

def load_run(folder: Path) -> Run:
    """The run folder's summary and records; ReportError when it is not a (finished) bench run."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"{folder}: not a folder (give the --out folder of a kernelopt bench run)")
    results = folder / "results.jsonl"
    if not results.is_file():
        raise ReportError(f"{folder}: not a bench run folder (no results.jsonl in it); give the --out folder "
                          "of a kernelopt bench run, or of a kernelopt model optimize run (plan.json, report.json)")
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        raise ReportError(f"{folder} has results.jsonl but no summary.json: the bench run did not finish (or an "
                          f"older kernelopt wrote it). Rerun the same kernelopt bench command with --out {folder}: "
                          "it resumes, judges nothing twice, and writes summary.json")
    summary = _read_summary(summary_path)
    records, skipped = _read_records(results)
    return Run(folder, summary, records, skipped)


def _read_summary(path: Path) -> dict:
    fix = "rerun the bench command with the same --out to rewrite it"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path} is damaged ({exc}): {fix}") from None
    if not isinstance(summary, dict):
        raise ReportError(f"{path} is damaged (not a JSON object): {fix}")
    for key, kind in (("levels", dict), ("overall", dict), ("problems", list)):
        if not isinstance(summary.get(key), kind):
            raise ReportError(f"{path} is damaged (no {key!r} {kind.__name__}): {fix}")
    for index, problem in enumerate(summary["problems"]):
        if not (isinstance(problem, dict) and {"level", "problem_id", "name"} <= problem.keys()
                and all(isinstance(problem[k], (int, type(None))) for k in ("level", "problem_id"))):
            raise ReportError(f"{path} is damaged (problems[{index}] lacks level, problem_id or name): {fix}")
    if any(not isinstance(summary["overall"].get(key), (int, float)) for key in ("n_problems", "fast_0")):
        raise ReportError(f"{path} is damaged (overall lacks n_problems or fast_0): {fix}")
    for key in ("speedup_distribution", "optimization_kinds"):  # optional, but whole when present
        part = summary.get(key)
        if part is not None and not (isinstance(part, dict) and isinstance(part.get("levels"), dict)
                                     and isinstance(part.get("overall"), dict)):
            raise ReportError(f"{path} is damaged ({key!r} lacks levels or overall): {fix}")
    if not isinstance(summary.get("vs_baselines", {}), dict):
        raise ReportError(f"{path} is damaged ('vs_baselines' is not an object): {fix}")
    return summary


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _read_records(path: Path) -> tuple[list[dict], int]:
    """results.jsonl's records, the last of each key winning (as bench reads it); damaged lines
    (a torn last line after a kill) are skipped and counted."""
    by_key: dict = {}
    skipped = 0
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines()):
        try:
            record = json.loads(line, parse_constant=_reject_constant)
        except ValueError:
            skipped += bool(line.strip())
            continue
        if not _usable_record(record):
            skipped += 1
            continue
        by_key[str(record.get("key", f"line {number}"))] = record
    return list(by_key.values()), skipped


def _usable_record(record) -> bool:
    if not isinstance(record, dict) or "level" not in record or "problem_id" not in record:
        return False
    if not all(isinstance(record[k], (int, type(None))) for k in ("level", "problem_id")):
        return False
    return record.get("kind") not in (None, "agent") or isinstance(record.get("correct"), bool)


# -- the report as data (report.json) --------------------------------------------------------------

def build_report(run: Run) -> dict:
    """Everything the report shows, as JSON-ready data."""
    summary = run.summary
    mode = summary.get("mode") or ("agent" if any(r.get("kind") == "agent" for r in run.records) else "solutions")
    rows = problem_rows(summary["problems"], run.records, mode)
    outcomes = {_key(r): ProblemOutcome(r["correct"], r["speedup"], tuple(r["kinds"])) for r in rows}
    levels = _levels(rows)
    keys = [_key(r) for r in rows]
    distribution = summary.get("speedup_distribution") or _by_level(rows, outcomes, speedup_distribution)
    kinds = summary.get("optimization_kinds") or _by_level(rows, outcomes, kind_breakdown)
    return {
        "run": str(run.folder),
        "mode": mode,
        "summary": summary,
        "speedup_distribution": distribution,
        "optimization_kinds": kinds,
        "problems": rows,
        "skipped_lines": run.skipped_lines,
        "plots": {
            "speedup_per_problem": [{"problem": _label(r), "name": r["name"], "speedup": r["speedup"],
                                     "correct": r["correct"], "status": r["status"]} for r in rows],
            "best_by_call": best_by_call_series(rows, run.records),
            "fast_p_curve": {
                "p": list(FAST_P_GRID),
                "overall": fast_p_curve(keys, outcomes, FAST_P_GRID),
                "levels": {level: fast_p_curve([k for k in keys if str(k[0]) == level], outcomes, FAST_P_GRID)
                           for level in levels},
            },
            "speedup_distribution": {"buckets": list(distribution["overall"]),
                                     "counts": list(distribution["overall"].values())},
        },
    }


def problem_rows(problems: list[dict], records: list[dict], mode: str = "solutions") -> list[dict]:
    """One row per problem of the set, in order: its best verdict (or "no_solution" / "not_run"),
    the referee's labels and flags, the reference's health, and for agent runs the run's cost."""
    missing = "no_solution" if mode == "solutions" else "not_run"
    verdicts = [r for r in records if r.get("kind") in (None, "agent")]
    best = best_per_problem(verdicts)
    attempts = Counter((r["level"], r["problem_id"]) for r in verdicts)
    health = {(r["level"], r["problem_id"]): r for r in records if r.get("kind") == "health"}
    rows = []
    for problem in problems:
        key = (problem["level"], problem["problem_id"])
        record = best.get(key, {})
        probe = health.get(key, {})
        outcome = outcome_of(record) if record else ProblemOutcome(False)
        row = {"level": problem["level"], "problem_id": problem["problem_id"], "name": str(problem["name"]),
               "status": str(record.get("status", missing)), "correct": outcome.correct,
               "speedup": _finite(outcome.speedup) if outcome.correct else None,
               "kinds": [str(k) for k in outcome.kinds], "flags": [str(f) for f in record.get("flags") or []],
               "health": [str(f) for f in probe.get("flags") or []],
               "health_details": [str(d) for d in probe.get("details") or []],
               "message": str(record.get("message") or record.get("error") or "")[:500], "attempts": attempts[key]}
        if record.get("kind") == "agent":
            row.update({column: record.get(column) for column in (*AGENT_COLUMNS, "run_id")})
        timing = record.get("timing")
        if outcome.correct and isinstance(timing, dict) and isinstance(timing.get("floor_ms"), (int, float)):
            row["sol"] = {key: timing.get(key) for key in ("floor_ms", "floor_source", "reference_sol",
                                                          "candidate_sol")}
        if isinstance(record.get("profile"), dict):  # --profile: the best result's profile
            row["profile"] = record["profile"]
        if isinstance(record.get("shapes"), list):  # the best result's input configurations
            row["shapes"] = record["shapes"]
        rows.append(row)
    return rows


def best_by_call_series(rows: list[dict], records: list[dict]) -> dict | None:
    """The best correct speedup after each LLM call, per agent-run problem, and over the whole
    set: the geometric mean of max(1, best so far) (a problem without a correct kernel faster than
    its reference keeps the reference: 1x) and the fractions correct and faster than 1x so far.
    None when the run has no agent records."""
    agent = best_per_problem([r for r in records if r.get("kind") == "agent"])
    if not agent:
        return None
    curves = {key: best_so_far(record.get("best_by_call")) for key, record in agent.items()}
    last_call = max((curve[-1][0] for curve in curves.values() if curve), default=0)
    calls = list(range(1, last_call + 1))
    keys = [_key(r) for r in rows]
    at = {call: [_best_at(curves.get(key, []), call) for key in keys] for call in calls}
    return {
        "calls": calls,
        "geomean_with_fallback": [geometric_mean([max(1.0, b or 1.0) for b in at[c]]) if keys else None
                                  for c in calls],
        "fast_0": [sum(b is not None for b in at[c]) / len(keys) if keys else 0.0 for c in calls],
        "fast_1": [sum(b is not None and b > 1 for b in at[c]) / len(keys) if keys else 0.0 for c in calls],
        "problems": [{"problem": _label(row), "points": [[c, b] for c, b in curves[_key(row)] if b is not None]}
                     for row in rows if _key(row) in curves],
    }


def best_so_far(raw) -> list[list]:
    """A record's best_by_call as [[call, best correct speedup so far or None], ...], by call,
    never decreasing; malformed entries are dropped."""
    points = []
    for entry in raw if isinstance(raw, list) else []:
        if (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], int)
                and (entry[1] is None or _finite(entry[1]) is not None)):
            points.append((entry[0], entry[1]))
    curve, best = [], None
    for call, value in sorted(points, key=lambda p: p[0]):
        if value is not None and value > 0 and (best is None or value > best):
            best = float(value)
        curve.append([call, best])
    return curve


def _best_at(curve: list[list], call: int) -> float | None:
    """The best after `call` calls: the last point at or before it (a run that ended earlier
    keeps its final best)."""
    best = None
    for point_call, value in curve:
        if point_call > call:
            break
        best = value
    return best


def _by_level(rows: list[dict], outcomes: dict, metric) -> dict:
    keys = [_key(r) for r in rows]
    return {"levels": {level: metric([k for k in keys if str(k[0]) == level], outcomes) for level in _levels(rows)},
            "overall": metric(keys, outcomes)}


def _levels(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(str(r["level"]) for r in rows))


def _key(row: dict) -> tuple:
    return (row["level"], row["problem_id"])


def _label(row: dict) -> str:
    return f"{row['level']}/{row['problem_id']}" if row["problem_id"] is not None else row["name"]


def _finite(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)

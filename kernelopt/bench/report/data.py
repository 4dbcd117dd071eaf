"""`kernelopt report RUN`: a bench run folder as report.html, report.json and report.md.

A bench run folder (written by `kernelopt bench`, in both modes) holds results.jsonl (every
verdict, health probe and agent run, one JSON object a line) and summary.json (the summary
`kernelopt bench --json` prints, plus "mode" and "problems": the whole set, in order). The
headline numbers are the summary's, never recomputed differently; what the summary does not hold
(each problem's best record, the best speedup after each LLM call) comes from results.jsonl with
the same best-verdict rule (kernelopt/kernelbench/metrics.py). The report is built once as plain
data (`build_report`: what report.json holds), then laid out as tables (`tables`) that both the
Markdown here and the HTML (kernelopt/bench/report/html.py) render, so the three never disagree.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from kernelopt.kernelbench.metrics import (
    DISTRIBUTION_KEYS, FAST_P_THRESHOLDS, ProblemOutcome, best_per_problem, fast_p_curve, fast_p_key,
    geometric_mean, kind_breakdown, outcome_of, speedup_distribution,
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


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""
    key: str = field(default="")  # an id for the HTML anchor


# -- reading a run folder --------------------------------------------------------------------------

def load_run(folder: Path) -> Run:
    """The run folder's summary and records; ReportError when it is not a (finished) bench run."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"{folder}: not a folder (give the --out folder of a kernelopt bench run)")
    results = folder / "results.jsonl"
    if not results.is_file():
        raise ReportError(f"{folder}: not a bench run folder (no results.jsonl in it); give the --out folder "
                          "of a kernelopt bench run")
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


# -- tables (shared by Markdown and HTML) ----------------------------------------------------------

METRIC_COLUMNS = ("n_problems", "n_correct", *(fast_p_key(p) for p in FAST_P_THRESHOLDS),
                  "geomean_speedup", "median_speedup")


def tables(report: dict) -> dict[str, Table]:
    """The report's tables by name: metrics (and one per baseline), distribution, kinds, health,
    problems."""
    summary = report["summary"]
    result = {"metrics": _metrics_table("Metrics", summary, "KernelBench's fast_p over every problem of "
                                        "the set (a problem without a correct result fails); geomean and "
                                        "median over the correct ones.")}
    for index, (name, against) in enumerate((summary.get("vs_baselines") or {}).items()):
        result[f"baseline {name}"] = _metrics_table(
            f"Metrics against {name}", against, f"Each correct speedup divided by {name}'s speedup over eager.",
            key=f"baseline-{index + 1}")
    result["distribution"] = _distribution_table(report["speedup_distribution"])
    result["kinds"] = _kinds_table(report["optimization_kinds"])
    result["health"] = _health_table(report["problems"])
    result["problems"] = _problems_table(report["problems"], report["mode"])
    return result


def _metrics_table(title: str, metrics: dict, note: str, key: str = "metrics") -> Table:
    headers = ["level", "problems", "correct", *(fast_p_key(p) for p in FAST_P_THRESHOLDS), "geomean", "median"]
    rows = []
    for level, values in [*metrics.get("levels", {}).items(), ("all", metrics.get("overall", {}))]:
        cells = [str(level)]
        for column in METRIC_COLUMNS:
            value = values.get(column)
            if column.startswith("fast_"):
                cells.append(f"{value:.2f}" if isinstance(value, (int, float)) else "-")
            elif column.endswith("_speedup"):
                cells.append(format_speedup(value))
            else:
                cells.append(str(value) if value is not None else "-")
        rows.append(cells)
    return Table(title, headers, rows, note, key=key)


def _distribution_table(distribution: dict) -> Table:
    buckets = [b for b in DISTRIBUTION_KEYS if b != "untimed" or distribution["overall"].get(b)]
    rows = [[str(level), *(str(counts.get(b, 0)) for b in buckets)]
            for level, counts in [*distribution["levels"].items(), ("all", distribution["overall"])]]
    return Table("Speedup distribution per level", ["level", *buckets], rows,
                 "Problems per bucket of their best correct speedup: a bucket a-b holds speedups above a up to "
                 "and including b; failed: no correct result.", key="distribution")


def _kinds_table(kinds: dict) -> Table:
    levels = list(kinds["levels"])
    rows = [[kind, str(values["n_problems"]), format_speedup(values["geomean_speedup"]),
             *(str(kinds["levels"][level].get(kind, {}).get("n_problems", 0)) for level in levels)]
            for kind, values in kinds["overall"].items()]
    return Table("Optimization kinds", ["kind", "problems", "geomean", *(f"level {level}" for level in levels)],
                 rows, "Problems whose best correct result the referee labelled with the kind (a result often has "
                 "several), and their geometric mean speedup." + ("" if rows else " No correct result."),
                 key="kinds")


def _health_table(rows: list[dict]) -> Table:
    flagged = [r for r in rows if r["health"]]
    return Table("Problem health", ["level", "id", "name", "flags", "details"],
                 [[str(r["level"]), _id(r), r["name"], ", ".join(r["health"]), "; ".join(r["health_details"])]
                  for r in flagged],
                 "References no candidate can be judged fairly against (see docs/bench.md); never charged "
                 "to a candidate." + ("" if flagged else " No reference was flagged."), key="health")


def _problems_table(rows: list[dict], mode: str) -> Table:
    agent = mode == "agent"
    headers = ["level", "id", "name", "status", "best speedup", "kinds", "flags", "health"]
    headers += ["LLM calls", "cost", "wall s"] if agent else ["samples"]
    body = []
    for r in rows:
        cells = [str(r["level"]), _id(r), r["name"], r["status"], format_speedup(r["speedup"]),
                 ", ".join(r["kinds"]), ", ".join(r["flags"]), ", ".join(r["health"])]
        cells += [_plain(r.get(c)) for c in AGENT_COLUMNS] if agent else [str(r["attempts"])]
        body.append(cells)
    return Table("Problems", headers, body, "Each problem's best result.", key="problems")


def format_speedup(value) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _id(row: dict) -> str:
    return "-" if row["problem_id"] is None else str(row["problem_id"])


def _plain(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# -- files -----------------------------------------------------------------------------------------

def headline(report: dict) -> str:
    """One sentence: the mode, the set's size, the main numbers, and for agent runs what ran."""
    summary = report["summary"]
    overall = summary["overall"]
    text = (f"{report['mode']} run over {overall['n_problems']} problems: fast_0 {overall['fast_0']:.2f}, "
            f"fast_1 {overall.get('fast_1', 0):.2f}, geomean {format_speedup(overall.get('geomean_speedup'))}")
    extras = [f"{label} {summary[key]}" for key, label in (("model", "model"), ("strategy", "strategy"),
                                                          ("llm_calls", "LLM calls"), ("cost", "cost"))
              if summary.get(key) is not None]
    return text + ("; " + ", ".join(extras) if extras else "") + "."


def render_markdown(report: dict) -> str:
    lines = [f"# kernelopt bench report: {_md(report['run'])}", "", _md(headline(report)), ""]
    for table in tables(report).values():
        lines += [f"## {_md(table.title)}", "", table.note, ""]
        if table.rows:
            lines.append("| " + " | ".join(_md(h) for h in table.headers) + " |")
            lines.append("|" + "---|" * len(table.headers))
            lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in table.rows]
            lines.append("")
    return "\n".join(lines)


def _md(text: str) -> str:
    """A table cell: one line, pipes escaped, HTML inert (a Markdown viewer renders raw HTML)."""
    return escape(" ".join(str(text).split()), quote=False).replace("\\", "\\\\").replace("|", "\\|")


def write_report(folder: Path, out: Path | None = None) -> dict:
    """Write report.html, report.json and report.md into `out` (default: the run folder)."""
    from kernelopt.bench.report.html import render_html

    report = build_report(load_run(folder))
    out = Path(out) if out is not None else Path(folder)
    files = {"html": out / "report.html", "json": out / "report.json", "md": out / "report.md"}
    try:
        out.mkdir(parents=True, exist_ok=True)
        files["json"].write_text(json.dumps(report, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        files["md"].write_text(render_markdown(report), encoding="utf-8")
        files["html"].write_text(render_html(report, tables(report)), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write the report into {out}: {exc}") from None
    return {"files": {kind: str(path) for kind, path in files.items()}, "report": report}

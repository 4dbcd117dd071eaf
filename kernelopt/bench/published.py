"""Published generations in their own release format, rescored by `kernelopt bench --solutions
FILE`: today CUDA-L1's (deepreinforce-ai/CUDA-L1, `optimized_cuda_code/h100.json` and siblings).

A CUDA-L1 release file holds one JSON object a line with `level_id`, `task_id`, `ref_code` (the
KernelBench reference it was scored against: `Model`, `get_inputs`, `get_init_inputs`),
`custom_code` (the candidate, `ModelNew`; null where no candidate was released), `score_default`
(the speedup it reported; null where none) and other `score_*` fields. Each entry's `ref_code` is
a problem (level from `level_id`, id from `task_id`, name from the entry's `name`/`problem_name`
or the first words of `Model`'s docstring), its `custom_code` a solution whose results.jsonl
record keeps the reported score beside our verdict (`reported_speedup`, `reported_scores`,
`line`). A bad line (not JSON, a missing or mistyped field, a `ref_code` that is no problem, a
second `ref_code` for the same task) is counted and reported with its line number, never judged.

`published_summary` builds the summary's "reported vs measured" section from the run's records:
one row per judged entry (their score, our status, speedup and interval, and the reason when we
disagree) and the aggregates over the same entries.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt.bench.rescore import Solution
from kernelopt.kernelbench import syntax
from kernelopt.kernelbench import Problem, ProblemError, ProblemSet, problem_from_source
from kernelopt.kernelbench.metrics import geometric_mean

REQUIRED = {"level_id": int, "task_id": int, "ref_code": str}
NAME_FIELDS = ("name", "problem_name", "task_name")
EXCERPT = 160


@dataclass
class Published:
    """What a release file holds: its problems (one per task), its candidates, and its bad lines."""

    source: str
    problem_set: ProblemSet
    solutions: list[Solution]
    bad_lines: list[dict] = field(default_factory=list)  # {"line": n, "error": why}
    without_candidate: list[dict] = field(default_factory=list)  # {"line", "level", "problem_id"}
    n_lines: int = 0


def read_published(path: Path, levels: set[int] | None = None, ids: set[int] | None = None) -> Published:
    """The entries of a CUDA-L1 release file (JSON Lines; a JSON array is also read), selected by
    level and task id. Raises ValueError when the file holds no usable entry at all."""
    text = path.read_text(encoding="utf-8", errors="replace")
    entries = _entries(text)
    problems: dict[tuple[int, int], tuple[int, Problem]] = {}  # (level, task) -> (line, problem)
    samples: dict[tuple[int, int], int] = {}
    solutions, bad, without = [], [], []
    for line, entry in entries:
        if isinstance(entry, str):
            bad.append({"line": line, "error": entry})
            continue
        error = _check(entry)
        if error:
            bad.append({"line": line, "error": error})
            continue
        level, task = entry["level_id"], entry["task_id"]
        if (levels and level not in levels) or (ids and task not in ids):
            continue
        key = (level, task)
        if key in problems:
            first_line, problem = problems[key]
            if problem.source != entry["ref_code"]:
                bad.append({"line": line, "error": f"level {level} task {task}: a ref_code other than line "
                                                   f"{first_line}'s for the same task"})
                continue
        else:
            name = _name(entry)
            try:
                problem = problem_from_source(entry["ref_code"], path=f"{path}#/level{level}/{task}_{name}.py",
                                              name=name)
            except ProblemError as exc:
                bad.append({"line": line, "error": f"ref_code is no KernelBench problem: {exc}"})
                continue
            problems[key] = (line, problem)
        if entry.get("custom_code") is None:
            without.append({"line": line, "level": level, "problem_id": task})
            continue
        sample = samples.get(key, 0)
        samples[key] = sample + 1
        scores = {k: v for k, v in entry.items() if k.startswith("score") and _number_or_none(v)}
        solutions.append(Solution(level, task, sample, Path(f"{path}:{line}"), entry["custom_code"],
                                  extra={"line": line, "reported_speedup": entry.get("score_default"),
                                         "reported_scores": scores}))
    if not problems and entries:
        reasons = "; ".join(f"line {b['line']}: {b['error']}" for b in bad[:3])
        raise ValueError(f"{path}: no usable entry" + (f" ({reasons})" if reasons else " in the selection"))
    ordered = sorted((p for _, p in problems.values()), key=lambda p: (p.level, p.problem_id))
    return Published(str(path), ProblemSet(str(path), tuple(ordered)),
                     sorted(solutions, key=lambda s: (s.level, s.problem_id, s.sample)), bad, without, len(entries))


def _entries(text: str) -> list[tuple[int, dict | str]]:
    """(line number, entry or the reason it is unusable) for each non-blank line; a file that is
    one JSON array gives its items, numbered from 1."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except json.JSONDecodeError:
            items = None
        if isinstance(items, list):
            return [(n, item if isinstance(item, dict) else "not a JSON object") for n, item in enumerate(items, 1)]
    entries: list[tuple[int, dict | str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            entries.append((number, f"not JSON ({exc.msg} at column {exc.colno})"))
            continue
        entries.append((number, entry if isinstance(entry, dict) else "not a JSON object"))
    return entries


def _check(entry: dict) -> str:
    missing = [k for k in (*REQUIRED, "custom_code") if k not in entry]
    if missing:
        return "missing field(s) " + ", ".join(missing)
    for key, kind in REQUIRED.items():
        if not isinstance(entry[key], kind) or isinstance(entry[key], bool):
            return f"{key} is not {'an integer' if kind is int else 'a string'}"
    if entry["custom_code"] is not None and not isinstance(entry["custom_code"], str):
        return "custom_code is not a string"
    if not _number_or_none(entry.get("score_default")):
        return "score_default is not a number"
    return ""


def _number_or_none(value) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _name(entry: dict) -> str:
    """The entry's own name, else the first words of Model's docstring, else Model; as a file stem."""
    for key in NAME_FIELDS:
        if isinstance(entry.get(key), str) and entry[key].strip():
            return _stem(re.sub(r"^\d+_", "", entry[key].strip().removesuffix(".py")))
    try:
        tree = syntax.parse(entry["ref_code"])
    except SyntaxError:
        return "Model"
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            doc = (ast.get_docstring(node) or "").strip().split("\n")[0]
            doc = re.sub(r"^(simple |a )?model that (performs |computes |applies )?(an? |the )?", "", doc,
                         flags=re.IGNORECASE)
            words = re.findall(r"[A-Za-z0-9]+", doc)[:6]
            return _stem("_".join(words)) if words else "Model"
    return "Model"


def _stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")[:60] or "Model"


# the summary's "reported vs measured" section --------------------------------------------------------

def published_summary(published: Published, records) -> dict:
    """Per judged entry: their score beside our verdict, speedup and interval, and the reason when
    we disagree; and the aggregates over the same entries."""
    by_key = {r["key"]: r for r in records if r.get("kind") is None}
    names = {(p.level, p.problem_id): p.name for p in published.problem_set}
    rows = []
    for solution in published.solutions:
        record = by_key.get(solution.key)
        if record is None:
            continue
        rows.append(_row(solution, record, names.get((solution.level, solution.problem_id), "")))
    return {"source": published.source, "format": "cuda-l1", "n_lines": published.n_lines,
            "n_entries": len(published.solutions), "bad_lines": published.bad_lines,
            "without_candidate": published.without_candidate, "aggregate": _aggregate(rows), "rows": rows}


def _row(solution: Solution, record: dict, name: str) -> dict:
    reported = solution.extra.get("reported_speedup")
    speedup = record.get("speedup")
    precision = (record.get("timing") or {}).get("speedup_precision")
    interval = None
    if speedup and isinstance(precision, (int, float)) and math.isfinite(precision):
        interval = [speedup * (1 - precision), speedup * (1 + precision)]
    agreement, reason = _agreement(record, reported, speedup, precision)
    return {"level": solution.level, "problem_id": solution.problem_id, "name": name, "sample": solution.sample,
            "line": solution.extra.get("line"), "reported_speedup": reported, "status": record["status"],
            "speedup": speedup, "speedup_precision": precision, "interval": interval,
            "agreement": agreement, "reason": reason}


def _agreement(record: dict, reported, speedup, precision) -> tuple[str, str]:
    """`agrees`, `no_reported_score`, `rejected`, `incorrect`, `slower` (their score above our
    interval), or the failing status (compile_error, runtime_error, timeout, problem_error, ...)."""
    status, message = record["status"], _excerpt(record.get("message") or "")
    if status == "rejected":
        flags = ", ".join(record.get("flags") or []) or "no flag"
        return "rejected", f"rejected ({flags}): {message}"
    if status == "incorrect":
        return "incorrect", f"incorrect: {message}"
    if status != "correct":
        return status, f"{status}: {message}"
    if reported is None:
        return "no_reported_score", ""
    upper = speedup * (1 + (precision or 0.0)) if speedup else 0.0
    if reported > upper:
        spread = f" ±{precision * 100:.1f}%" if isinstance(precision, (int, float)) else ""
        return "slower", f"slower than reported: measured {speedup or 0.0:.3g}x{spread}, reported {reported:.3g}x"
    return "agrees", ""


def _excerpt(message: str) -> str:
    text = " ".join(message.split())
    return text if len(text) <= EXCERPT else text[:EXCERPT - 3] + "..."


def _aggregate(rows: list[dict]) -> dict:
    """Over the entries with a reported score: their mean and geomean against ours, where a
    candidate we do not find correct counts as 1x (the reference stays), and against ours over
    the entries we find correct only; and how many we reject, find incorrect, or slower."""
    scored = [r for r in rows if isinstance(r["reported_speedup"], (int, float)) and r["reported_speedup"] > 0]
    ours = [r["speedup"] if r["status"] == "correct" and r["speedup"] else 1.0 for r in scored]
    correct = [r for r in scored if r["status"] == "correct" and r["speedup"]]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["agreement"]] = counts.get(row["agreement"], 0) + 1
    return {
        "n_judged": len(rows), "n_reported": len(scored), "agreement": counts,
        "n_rejected": counts.get("rejected", 0), "n_incorrect": counts.get("incorrect", 0),
        "n_slower": counts.get("slower", 0), "n_correct": sum(1 for r in rows if r["status"] == "correct"),
        "reported_mean": _mean([r["reported_speedup"] for r in scored]),
        "reported_geomean": geometric_mean([r["reported_speedup"] for r in scored]),
        "measured_mean": _mean(ours), "measured_geomean": geometric_mean(ours),
        "n_both_correct": len(correct),
        "reported_geomean_where_correct": geometric_mean([r["reported_speedup"] for r in correct]),
        "measured_geomean_where_correct": geometric_mean([r["speedup"] for r in correct]),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def render_published(section: dict) -> list[str]:
    """The section as text lines for `kernelopt bench` (the report renders it as a table)."""
    lines = [f"reported vs measured ({section['source']}):",
             "level  task  sample  reported  status         measured  interval           reason"]
    for row in section["rows"]:
        lines.append(f"{row['level']:<5}  {row['problem_id']:>4}  {row['sample']:>6}  "
                     f"{_x(row['reported_speedup']):>8}  {row['status']:<13}  {_x(row['speedup']):>8}  "
                     f"{_interval(row['interval']):<17}  {row['reason'] or row['agreement']}")
    a = section["aggregate"]
    lines.append(f"over {a['n_reported']} entries with a reported score: reported mean {_x(a['reported_mean'])}, "
                 f"geomean {_x(a['reported_geomean'])}; measured (a failing candidate as 1x) mean "
                 f"{_x(a['measured_mean'])}, geomean {_x(a['measured_geomean'])}")
    lines.append(f"where we find the candidate correct ({a['n_both_correct']}): reported geomean "
                 f"{_x(a['reported_geomean_where_correct'])}, measured {_x(a['measured_geomean_where_correct'])}")
    lines.append(f"{a['n_judged']} judged: {a['n_correct']} correct, {a['n_rejected']} rejected, "
                 f"{a['n_incorrect']} incorrect, {a['n_slower']} slower than reported")
    for bad in section["bad_lines"]:
        lines.append(f"line {bad['line']} not judged: {bad['error']}")
    if section["without_candidate"]:
        lines.append(f"{len(section['without_candidate'])} entries without a candidate (custom_code null): lines "
                     + ", ".join(str(w["line"]) for w in section["without_candidate"]))
    return lines


def _x(value) -> str:
    return f"{value:.3g}x" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _interval(interval) -> str:
    return f"{interval[0]:.3g}-{interval[1]:.3g}x" if interval else "-"

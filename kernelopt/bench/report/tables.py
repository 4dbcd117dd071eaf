"""The report laid out: the tables (metrics, one per baseline, distribution, kinds, health,
problems, speed of light where verdicts carry a physical floor, profiles where a pass ran with
--profile) and the headline sentence, from the data build_report gives. Both markdown.py and
html.py render these same tables, so the three files of a report never disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kernelopt.agent.store import describe_cost
from kernelopt.bench.report.data import AGENT_COLUMNS
from kernelopt.kernelbench.metrics import DISTRIBUTION_KEYS, FAST_P_THRESHOLDS, fast_p_key


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""
    key: str = field(default="")  # an id for the HTML anchor


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
    if summary.get("published"):
        result["published"] = _published_table(summary["published"])
    result["distribution"] = _distribution_table(report["speedup_distribution"])
    result["kinds"] = _kinds_table(report["optimization_kinds"])
    result["health"] = _health_table(report["problems"])
    result["problems"] = _problems_table(report["problems"], report["mode"])
    if any(r.get("shapes") for r in report["problems"]):
        result["shapes"] = _shapes_table(report["problems"])
    if any(r.get("sol") for r in report["problems"]):
        result["sol"] = _sol_table(report["problems"])
    if any(r.get("profile") for r in report["problems"]):
        result["profiles"] = _profiles_table(report["problems"])
    return result


def _published_table(section: dict) -> Table:
    """A published release rescored (kernelopt/bench/published.py): their score beside ours."""
    headers = ["level", "id", "name", "sample", "line", "reported", "status", "measured", "interval", "reason"]
    rows = [[str(r["level"]), str(r["problem_id"]), r["name"], str(r["sample"]), str(r["line"]),
             format_speedup(r["reported_speedup"]), r["status"], format_speedup(r["speedup"]),
             f"{format_speedup(r['interval'][0])}-{format_speedup(r['interval'][1])}" if r["interval"] else "-",
             r["reason"] or r["agreement"]] for r in section["rows"]]
    a = section["aggregate"]
    note = (f"{section['source']}: over the {a['n_reported']} entries with a reported score, reported mean "
            f"{format_speedup(a['reported_mean'])} and geomean {format_speedup(a['reported_geomean'])}; measured "
            f"(a candidate not correct counts as 1x) mean {format_speedup(a['measured_mean'])} and geomean "
            f"{format_speedup(a['measured_geomean'])}; where correct ({a['n_both_correct']}) reported geomean "
            f"{format_speedup(a['reported_geomean_where_correct'])}, measured "
            f"{format_speedup(a['measured_geomean_where_correct'])}. {a['n_judged']} judged: {a['n_correct']} "
            f"correct, {a['n_rejected']} rejected, {a['n_incorrect']} incorrect, {a['n_slower']} slower than "
            f"reported; {len(section['bad_lines'])} bad line(s)"
            + (" (" + ", ".join(str(b["line"]) for b in section["bad_lines"]) + ")" if section["bad_lines"] else "")
            + f", {len(section['without_candidate'])} entries without a candidate.")
    return Table("Reported vs measured", headers, rows, note, key="published")


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
        cells += [_agent_cell(r, c) for c in AGENT_COLUMNS] if agent else [str(r["attempts"])]
        body.append(cells)
    return Table("Problems", headers, body, "Each problem's best result.", key="problems")


def _shapes_table(rows: list[dict]) -> Table:
    """Problems with several input configurations: each one's reading, and the geometric means
    of the shown and the held-out ones side by side (a search tuned to the shown sizes shows
    as a gap between them)."""
    body = []
    for r in rows:
        shapes = r.get("shapes") or []
        if not shapes:
            continue
        cells = [f"[{s['name']}]{' (held out)' if s.get('held_out') else ''} "
                 + (format_speedup(s["speedup"]) if s.get("speedup") is not None else str(s.get("status")))
                 for s in shapes]
        body.append([str(r["level"]), _id(r), r["name"], format_speedup(_geomean(shapes, False)),
                     format_speedup(_geomean(shapes, True)), "; ".join(cells)])
    return Table("Input configurations", ["level", "id", "name", "shown: geomean", "held out: geomean",
                                          "configurations"], body,
                 "Problems that declare several input configurations (docs/problems.md): the best result's "
                 "speedup on each, and the geometric means of those shown in the prompt and of those held out.",
                 key="shapes")


def _geomean(shapes: list[dict], held_out: bool) -> float | None:
    values = [s["speedup"] for s in shapes if bool(s.get("held_out")) == held_out and s.get("speedup")]
    if not values or len(values) < sum(1 for s in shapes if bool(s.get("held_out")) == held_out):
        return None  # one of them was not correct (or not judged)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _sol_table(rows: list[dict]) -> Table:
    """Each best correct result's fraction of speed of light, and the reference's: the physical
    floor of a call (its bytes at the device's fastest memory) over the mean time per call."""
    body = [[str(r["level"]), _id(r), r["name"], format_speedup(r["speedup"]), _fraction(sol.get("candidate_sol")),
             _fraction(sol.get("reference_sol")), f"{sol['floor_ms']:.4g}", str(sol.get("floor_source") or "-")]
            for r in rows if (sol := r.get("sol"))]
    return Table("Speed of light", ["level", "id", "name", "best speedup", "candidate SOL", "reference SOL",
                                    "floor ms", "ceiling"], body,
                 "Each problem's best correct result: the physical floor of one call (its inputs read and outputs "
                 "written once, at the device's fastest memory: measured on a CPU, the datasheet on a known GPU) "
                 "over each side's mean time per call (docs/referee.md, 'The physical floor').", key="sol")


def _fraction(value) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    return f"{value:.2%}" if value < 0.01 else f"{value:.1%}"


def _profiles_table(rows: list[dict]) -> Table:
    """Where the best result's time goes (--profile): each side's largest kernel (op) and its
    share, and how close each side comes to the roofline."""
    body = []
    for r in rows:
        profile = r.get("profile")
        if not profile:
            continue
        sides = [profile.get("reference") or {}, profile.get("candidate") or {}]
        body.append([str(r["level"]), _id(r), r["name"], *(_top_row(side) for side in sides),
                     *(_roofline_cell(side) for side in sides), "; ".join(profile.get("notes") or [])[:200]])
    return Table("Profiles", ["level", "id", "name", "reference: top", "candidate: top", "reference: roofline",
                              "candidate: roofline", "notes"], body,
                 "Each problem's best result profiled after its verdict (--profile; advisory, not part of the "
                 "verdict): each side's largest kernel (GPU) or op (CPU, self time) with its share of the "
                 "profiled time, and the share of the speed of light (GPU with known peaks) or the achieved "
                 "GFLOP/s at its measured time (the problem's FLOPs, counted on the reference).", key="profiles")


def _top_row(side: dict) -> str:
    rows = [row for row in side.get("rows") or [] if row.get("name") != "other"]
    if not rows:
        return "-"
    name = str(rows[0]["name"])
    return f"{name[:60]}{'...' if len(name) > 60 else ''} ({rows[0]['share']:.0%})"


def _roofline_cell(side: dict) -> str:
    if side.get("speed_of_light") is not None:
        return f"{side['speed_of_light']:.1%} of speed of light"
    if side.get("gflops"):
        return f"{side['gflops']:.4g} GFLOP/s"
    if side.get("gbytes") is not None:
        return f"{side['gbytes']:.4g} GB/s"
    return "-"


def format_speedup(value) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _id(row: dict) -> str:
    return "-" if row["problem_id"] is None else str(row["problem_id"])


def _agent_cell(row: dict, column: str) -> str:
    if column == "cost" and row.get("run_id") and row.get("cost") is None:
        return "unknown"  # a run whose model had no price: not free
    return _plain(row.get(column))


def _plain(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def headline(report: dict) -> str:
    """One sentence: the mode, the set's size, the main numbers, and for agent runs what ran."""
    summary = report["summary"]
    overall = summary["overall"]
    text = (f"{report['mode']} run over {overall['n_problems']} problems: fast_0 {overall['fast_0']:.2f}, "
            f"fast_1 {overall.get('fast_1', 0):.2f}, geomean {format_speedup(overall.get('geomean_speedup'))}")
    extras = [f"{label} {summary[key]}" for key, label in (("model", "model"), ("strategy", "strategy"),
                                                          ("llm_calls", "LLM calls"))
              if summary.get(key) is not None]
    if report["mode"] == "agent" and "llm_calls" in summary:
        cost = summary.get("cost")
        extras.append(("cost " if cost is not None else "") + describe_cost(cost))
    return text + ("; " + ", ".join(extras) if extras else "") + "."



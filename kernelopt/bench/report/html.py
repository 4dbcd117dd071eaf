"""report.html: one self-contained page (inline CSS and SVG, no script, nothing fetched) showing
the report's tables (tables.py) and four plots: speedup per problem, best speedup
against LLM calls, the fast_p curve and the speedup distribution.

Every string that comes from the run (problem names, statuses, messages, paths) is escaped here
or in svg_charts.py; nothing from the data is ever placed in the page unescaped.
"""

from __future__ import annotations

from html import escape

from kernelopt.bench.report import svg_charts as charts
from kernelopt.bench.report.tables import Table, headline
from kernelopt.kernelbench.metrics import SPEEDUP_BUCKETS

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1000px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } tr:nth-child(even) td { background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; font-size: 0.9em; } figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.9em; }
svg.chart { max-width: 100%; height: auto; font-family: inherit; }
"""


def _head(kind: str, run: str, headline_text: str) -> list[str]:
    return ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>kernelopt {kind} report: {escape(run)}</title><style>{STYLE}</style></head><body>",
            f"<h1>kernelopt {kind} report</h1><p>Run <code>{escape(run)}</code>: {escape(headline_text)}</p>"]


def render_html(report: dict, tables: dict[str, Table]) -> str:
    parts = _head("bench", report["run"], headline(report))
    if report.get("skipped_lines"):
        parts.append(f'<p class="note">{report["skipped_lines"]} damaged line(s) of results.jsonl were left out.</p>')
    for name, table in tables.items():
        if name in ("metrics", "published") or name.startswith("baseline "):
            parts.append(render_table(table))
    parts.append(speedup_per_problem(report["plots"]["speedup_per_problem"]))
    parts.append(best_by_call(report["plots"]["best_by_call"]))
    parts.append(fast_p(report["plots"]["fast_p_curve"]))
    parts.append(distribution(report["plots"]["speedup_distribution"]))
    for name in ("distribution", "kinds", "health", "problems", "shapes", "profiles"):
        if name in tables:  # shapes, profiles: only where a result has them
            parts.append(render_table(tables[name]))
    parts.append("</body></html>")
    return "\n".join(parts)


def render_table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in table.rows)
    html = f'<h2 id="{escape(table.key)}">{escape(table.title)}</h2><p class="note">{escape(table.note)}</p>'
    return html + (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if table.rows else "")


def _cell(text: str) -> str:
    numeric = text.replace(".", "", 1).rstrip("x").isdigit()
    return f'<td class="num">{escape(text)}</td>' if numeric else f"<td>{escape(text)}</td>"


def _figure(key: str, svg: str, caption: str) -> str:
    return f'<figure id="plot-{key}">{svg}<figcaption>{escape(caption)}</figcaption></figure>'


def speedup_per_problem(items: list[dict]) -> str:
    bars = [charts.Bar(item["problem"], item["speedup"],
                       f"{item['problem']} {item['name']}: {item['status']}"
                       + (f" {item['speedup']:.3g}x" if item["speedup"] is not None else ""),
                       failed=not item["correct"]) for item in items]
    svg = charts.speedup_bars(bars, "Best speedup per problem")
    return "<h2>Speedup per problem</h2>" + _figure(
        "speedup", svg, "Each problem's best correct speedup over its reference, on a log scale around 1x "
        "(green: faster, orange: slower); a red cross is a problem without a correct result.")


def best_by_call(series: dict | None) -> str:
    title = "<h2>Best speedup against LLM calls</h2>"
    if series is None:
        return title + '<p class="note">No agent runs in this folder (it scored existing solutions): this plot ' \
                       "needs kernelopt bench run with the agent.</p>"
    if not series["calls"]:
        return title + '<p class="note">The agent runs recorded no LLM calls.</p>'
    lines = [charts.Series(item["problem"], [(c, b) for c, b in item["points"]],
                           color=charts.PALETTE[index % len(charts.PALETTE)], css="problem")
             for index, item in enumerate(series["problems"]) if item["points"]]
    lines.append(charts.Series("geomean over the set (a problem without a faster correct kernel counts as 1x)",
                               list(zip(series["calls"], series["geomean_with_fallback"])), bold=True,
                               markers=True, css="geomean"))
    svg = charts.line_chart(lines, "Best correct speedup after each LLM call", "LLM calls", "speedup",
                            _call_ticks(series["calls"][-1]), log_y=True)
    return title + _figure("calls", svg, "Thin lines: each problem's best correct speedup so far (from its first "
                           "correct kernel). Bold: the geometric mean over every problem of the set of max(1, best so "
                           "far).")


def _call_ticks(last: int) -> list[float]:
    step = max(1, -(-last // 10))
    ticks: list[float] = list(range(1, last + 1, step))
    return ticks if ticks[-1] == last else [*ticks, last]


def fast_p(curve: dict) -> str:
    points = curve["p"]
    lines = []
    if len(curve["levels"]) > 1:
        lines = [charts.Series(f"level {level}", list(zip(points, values)),
                               color=charts.PALETTE[index % len(charts.PALETTE)], css="level")
                 for index, (level, values) in enumerate(curve["levels"].items())]
    lines.append(charts.Series("all problems", list(zip(points, curve["overall"])), bold=True, css="overall"))
    svg = charts.line_chart(lines, "fast_p: fraction of problems correct and faster than p", "p (speedup)",
                            "fraction", [0, 0.5, 1, 1.5, 2, 2.5, 3], y_ticks=[0, 0.25, 0.5, 0.75, 1],
                            y_format=lambda v: f"{v:g}")
    return "<h2>fast_p curve</h2>" + _figure(
        "fast-p", svg, "The fraction of the set's problems whose best result is correct with a speedup above p "
        "(at p = 0: correct at all); KernelBench reports it at 0, 0.5, 0.8, 1, 1.5 and 2.")


def distribution(series: dict) -> str:
    colors = {"failed": charts.FAILED, "untimed": charts.NEUTRAL}
    colors.update({name: charts.SLOW if upper <= 1 else charts.FAST for name, _, upper in SPEEDUP_BUCKETS})
    bars = [(bucket, count, colors.get(bucket, charts.NEUTRAL))
            for bucket, count in zip(series["buckets"], series["counts"]) if bucket != "untimed" or count]
    svg = charts.count_bars(bars, "Problems per best-speedup bucket")
    return "<h2>Speedup distribution</h2>" + _figure(
        "distribution", svg, "How many problems' best correct speedup falls in each bucket (a-b: above a, up to "
        "and including b); failed: no correct result.")


def render_model_html(report: dict, tables: dict[str, Table], headline_text: str) -> str:
    """The page of a `kernelopt model optimize` run: its "Hot spots" section (model_run.py's
    tables) and a plot of each spot's speedup alone beside Amdahl's prediction and the measured
    end-to-end speedup."""
    parts = _head("model", report["run"], headline_text)
    parts.append('<section id="model">')
    parts.append(render_table(tables["model spots"]))
    parts.append(render_table(tables["model end to end"]))
    parts.append(model_speedups(report))
    if "model not extracted" in tables:
        parts.append(render_table(tables["model not extracted"]))
    parts.append("</section></body></html>")
    return "\n".join(parts)


def model_speedups(report: dict) -> str:
    e2e = report["end_to_end"]
    bars = [charts.Bar(s["module"], s["speedup_alone"], f"{s['module']} alone: {s.get('alone') or '-'}"
                       + (f" {s['speedup_alone']:.3g}x" if s["speedup_alone"] else ""),
                       failed=not s["speedup_alone"]) for s in report["spots"]]
    predicted = report.get("amdahl_prediction")
    bars.append(charts.Bar("Amdahl prediction", predicted,
                           f"Amdahl's prediction: {predicted:.3g}x" if predicted else "no kept spot", failed=not predicted))
    measured = e2e.get("speedup") if e2e.get("correct") else None
    interval = e2e.get("interval")
    bars.append(charts.Bar("end to end", measured,
                           f"end to end: {e2e.get('status')}" + (f" {measured:.3g}x" if measured else "")
                           + (f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else ""), failed=not measured))
    svg = charts.speedup_bars(bars, "Speedups: each hot spot alone, Amdahl's prediction, end to end")
    return "<h2>Speedups</h2>" + _figure(
        "model-speedups", svg, "Each hot spot's best speedup alone, the end-to-end speedup Amdahl's law predicts "
        "from the kept spots' shares and speedups, and the composed model's measured speedup (log scale around "
        "1x; a red cross: no correct result).")

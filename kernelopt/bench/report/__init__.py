"""`kernelopt report RUN`: a bench run folder as report.json, report.md and report.html.

The report is built once as plain data (data.py: what report.json holds), laid out as tables
(tables.py), and rendered as Markdown (markdown.py) and as one self-contained HTML page with SVG
plots (html.py, svg_charts.py). Each layer imports only the ones before it; `write_report` here
writes the three files.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelopt.bench.report.data import ReportError, build_report, load_run
from kernelopt.bench.report.html import render_html
from kernelopt.bench.report.markdown import render_markdown
from kernelopt.bench.report.tables import headline, tables

__all__ = ["ReportError", "build_report", "headline", "load_run", "write_report"]


def write_report(folder: Path, out: Path | None = None) -> dict:
    """Write report.html, report.json and report.md into `out` (default: the run folder)."""
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

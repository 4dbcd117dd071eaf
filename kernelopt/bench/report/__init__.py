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
from kernelopt.bench.report.html import render_html, render_model_html
from kernelopt.bench.report.markdown import render_markdown, render_tables
from kernelopt.bench.report.model_run import is_model_run, load_model_run, model_headline, model_tables
from kernelopt.bench.report.tables import headline, tables

__all__ = ["ReportError", "build_report", "headline", "is_model_run", "load_run", "model_headline", "write_report"]


def write_report(folder: Path, out: Path | None = None) -> dict:
    """Write report.html, report.json and report.md into `out` (default: the run folder). A
    `kernelopt model optimize` folder gets its hot spots' page; its report.json (written by
    model optimize, the data the page shows) is copied to `out` as it is, never rewritten."""
    model = is_model_run(folder)
    report = load_model_run(folder) if model else build_report(load_run(folder))
    out = Path(out) if out is not None else Path(folder)
    files = {"html": out / "report.html", "json": out / "report.json", "md": out / "report.md"}
    try:
        out.mkdir(parents=True, exist_ok=True)
        if model:
            laid_out, line = model_tables(report), model_headline(report)
            if files["json"].resolve() != (Path(folder) / "report.json").resolve():
                files["json"].write_bytes((Path(folder) / "report.json").read_bytes())
            files["md"].write_text(render_tables(f"kernelopt model report: {report['run']}", line, laid_out),
                                   encoding="utf-8")
            files["html"].write_text(render_model_html(report, laid_out, line), encoding="utf-8")
            return {"files": {kind: str(path) for kind, path in files.items()}, "report": report}
        files["json"].write_text(json.dumps(report, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        files["md"].write_text(render_markdown(report), encoding="utf-8")
        files["html"].write_text(render_html(report, tables(report)), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write the report into {out}: {exc}") from None
    return {"files": {kind: str(path) for kind, path in files.items()}, "report": report}

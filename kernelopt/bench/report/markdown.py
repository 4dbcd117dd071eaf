"""report.md: the report's headline and tables as Markdown (tables.py lays them out)."""

from __future__ import annotations

from html import escape

from kernelopt.bench.report.tables import headline, tables


def render_markdown(report: dict) -> str:
    return render_tables(f"kernelopt bench report: {report['run']}", headline(report), tables(report))


def render_tables(title: str, headline_text: str, laid_out: dict) -> str:
    """A title, the headline and the tables as Markdown (a bench run's, or a model run's)."""
    lines = [f"# {_md(title)}", "", _md(headline_text), ""]
    for table in laid_out.values():
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

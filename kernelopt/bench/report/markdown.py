"""report.md: the report's headline and tables as Markdown (tables.py lays them out)."""

from __future__ import annotations

from html import escape

from kernelopt.bench.report.tables import headline, tables


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

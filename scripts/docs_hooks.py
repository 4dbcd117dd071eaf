"""MkDocs hooks (mkdocs.yml `hooks:`): each `<!-- cli-options: COMMAND -->` in a page becomes
that command's option tables, made from kernelopt's own parser (kernelopt/cli/reference.py)."""

from kernelopt.cli.parser import build_parser
from kernelopt.cli.reference import expand_markers

_PARSER = build_parser()


def on_page_markdown(markdown, page, config, files):
    return expand_markers(markdown, _PARSER)

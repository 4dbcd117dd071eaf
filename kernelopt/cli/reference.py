"""The command line's reference, in Markdown, from the parser itself: the docs site's option
tables (scripts/docs_hooks.py puts one wherever a page says `<!-- cli-options: COMMAND -->`), so
the documentation and `--help` cannot disagree. Given the parser (cli/parser.py's
`build_parser()`), as no command module imports the parser."""

from __future__ import annotations

import argparse

_MARKER = "<!-- cli-options: {} -->"


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each top-level command's parser, by name, in `kernelopt --help`'s order."""
    return _subcommands(parser)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options_markdown(parser: argparse.ArgumentParser, command: str) -> str:
    """The options of `kernelopt COMMAND` (and of each of its subcommands) as Markdown tables."""
    parsers = command_parsers(parser)
    if command not in parsers:
        raise KeyError(f"no command {command!r}")
    return _parser_markdown(parsers[command], f"kernelopt {command}", level=3)


def _parser_markdown(parser: argparse.ArgumentParser, name: str, level: int) -> str:
    parts = [f"`{' '.join(parser.format_usage().split())}`\n" if level == 3 else
             f"{'#' * level} `{name}`\n\n`{' '.join(parser.format_usage().split())}`\n"]
    rows = [_row(action) for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))]
    if rows:
        parts.append("\n| option | default | what it does |\n| --- | --- | --- |\n" + "".join(rows))
    for sub_name, sub in _subcommands(parser).items():
        parts.append("\n" + _parser_markdown(sub, f"{name} {sub_name}", level + 1))
    return "".join(parts)


def _row(action: argparse.Action) -> str:
    names = ", ".join(f"`{n}`" for n in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        names += " {" + ", ".join(str(c) for c in action.choices) + "}"
    default = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS) or action.required else f"`{default}`"
    text = (action.help or "") % {"default": default, "prog": ""} if action.help else ""
    return f"| {names} | {shown} | {_cell(text)} |\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def expand_markers(markdown: str, parser: argparse.ArgumentParser) -> str:
    """`markdown` with every `<!-- cli-options: COMMAND -->` replaced by that command's tables."""
    for command in command_parsers(parser):
        marker = _MARKER.format(command)
        if marker in markdown:
            markdown = markdown.replace(marker, options_markdown(parser, command))
    return markdown

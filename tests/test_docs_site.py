"""The documentation site: it builds with warnings as errors, every command has a page whose
option tables come from the parser, every option appears there and has help text, and the README
stays a landing page."""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelopt.cli.parser import build_parser
from kernelopt.cli.reference import command_parsers, expand_markers, options_markdown

REPO = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"
PARSER = build_parser()
COMMANDS = command_parsers(PARSER)


def _options(parser: argparse.ArgumentParser, name: str):
    """(command path, option or positional, its action) for a parser and its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _options(sub, f"{name} {sub_name}")
        elif not isinstance(action, argparse._HelpAction):
            yield name, (action.option_strings or [action.metavar or action.dest])[0], action


ALL_OPTIONS = [item for name, parser in COMMANDS.items() for item in _options(parser, name)]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_a_page_with_its_option_tables(command):
    page = REPO / "docs" / "commands" / f"{command}.md"
    assert page.exists(), f"docs/commands/{command}.md is missing"
    assert f"<!-- cli-options: {command} -->" in page.read_text()
    assert f"commands/{command}.md" in (REPO / "mkdocs.yml").read_text()


@pytest.mark.parametrize("command, option", [(c, o) for c, o, _ in ALL_OPTIONS])
def test_every_option_is_in_the_reference_with_help(command, option):
    top = command.split()[0]
    assert f"`{option}`" in options_markdown(PARSER, top)
    action = next(a for c, o, a in ALL_OPTIONS if c == command and o == option)
    assert action.help, f"kernelopt {command} {option} has no help text"


def test_a_marker_becomes_the_tables_and_other_text_is_kept():
    text = expand_markers("before\n<!-- cli-options: runs -->\nafter", PARSER)
    assert text.startswith("before\n") and text.endswith("\nafter")
    assert "`kernelopt runs show`" in text and "| `--store` |" in text and "cli-options" not in text


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is not installed (pip install -e '.[docs]')")
def test_the_site_builds_with_warnings_as_errors_and_shows_every_option(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                                              "PATH": str(MKDOCS.parent) + ":/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    for command in COMMANDS:
        page = html.unescape((site / "commands" / command / "index.html").read_text())
        text = re.sub(r"<[^>]+>", "", page)
        for name, option, _ in ALL_OPTIONS:
            if name.split()[0] == command:
                assert option in text, f"{option} of kernelopt {name} is not on its page"
    shutil.rmtree(site)


def test_the_readme_is_a_landing_page_with_the_two_commands():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    assert "bash scripts/setup.sh && .venv/bin/kernelopt optimize" in readme
    assert "bash scripts/test.sh --all" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).exists(), f"the README links to {link}, which does not exist"

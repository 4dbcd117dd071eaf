"""Terminal output (kernelopt/cli/console.py): a progress bar and tables on a terminal, and on
a pipe exactly the plain lines scripts and logs have always read."""

from __future__ import annotations

import io

from kernelopt.bench.runner import Progress
from kernelopt.cli.console import ConsoleProgress, print_table


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_pipe_progress_is_the_plain_lines(monkeypatch):
    stream = io.StringIO()
    with ConsoleProgress("judging", stream) as report:
        progress = Progress(2, report)
        progress.step("level 1 problem 1", {"status": "correct", "speedup": 1.5}, 2.0)
        progress.step("level 1 problem 2", {"status": "incorrect"}, 2.0)
    lines = stream.getvalue().splitlines()
    assert lines == ["[1/2] level 1 problem 1: correct 1.50x  ETA 0m02s",
                     "[2/2] level 1 problem 2: incorrect  ETA 0m00s"]


def test_on_a_terminal_a_bar_counts_the_items_and_the_lines_scroll_above_it(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    stream = Terminal()
    with ConsoleProgress("judging", stream) as report:
        progress = Progress(3, report)
        for index in range(3):
            progress.step(f"level 1 problem {index + 1}", {"status": "correct", "speedup": 2.0}, 1.0)
    text = stream.getvalue()
    assert "judging" in text and "3/3" in text and "ETA" in text
    assert "━" in text  # the bar itself
    for index in range(3):
        assert f"[{index + 1}/3] level 1 problem {index + 1}: correct 2.00x" in text


def test_tables_on_a_terminal_and_plain_lines_on_a_pipe(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    rows = [("run-1", "finished", "1.500x")]
    plain = io.StringIO()
    print_table(("run", "status", "best"), rows, ["run-1  finished  best 1.500x"], stream=plain)
    assert plain.getvalue() == "run-1  finished  best 1.500x\n"
    terminal = Terminal()
    print_table(("run", "status", "best"), rows, ["unused"], title="runs", stream=terminal)
    text = terminal.getvalue()
    assert "unused" not in text and "run-1" in text and "1.500x" in text and "status" in text
    assert any(corner in text for corner in "┏┃│")

"""Terminal output: progress bars and tables on a terminal, plain lines elsewhere.

On a terminal, a command that works through many items (bench, generate, baselines, cache
warm) shows a rich progress bar with the ETA, and the finished items' lines scroll above it;
`runs list` and `doctor` print tables. When the stream is a pipe or a file (a log, CI, a test),
everything is the plain lines it always was, and `--json` output never goes through here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def is_terminal(stream: TextIO) -> bool:
    return stream.isatty() and os.environ.get("TERM") != "dumb"


class ConsoleProgress:
    """A `report(line)` callable for long commands, with `update(done, total, eta)` for the bar (kernelopt.bench.runner.Progress calls both). Use as a context manager so the bar
    is taken down when the command ends."""

    def __init__(self, description: str, stream: TextIO | None = None):
        self.description = description
        self.stream = stream or sys.stderr
        self.live = is_terminal(self.stream)
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self.stream, flush=True)

    def update(self, done: int, total: int, eta: str = "-") -> None:
        if not self.live:
            return
        if self._bar is None or self._task is None:
            self._bar, self._task = self._start(total)
        self._bar.update(self._task, completed=done, total=total, eta=eta)

    def _start(self, total: int) -> tuple[Progress, TaskID]:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=self.stream, force_terminal=True)
        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"), console=console, transient=False)
        task = bar.add_task(self.description, total=total, eta="-")
        bar.start()
        return bar, task

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> ConsoleProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], plain_lines: Sequence[str],
                title: str | None = None, stream: TextIO | None = None) -> None:
    """A table on a terminal; the given plain lines otherwise (what scripts parse today)."""
    stream = stream or sys.stdout
    if not is_terminal(stream):
        for line in plain_lines:
            print(line, file=stream)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(*headers, title=title, title_justify="left")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console(file=stream, force_terminal=True).print(table)


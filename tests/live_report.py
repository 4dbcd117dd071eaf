"""A pytest plugin for runs that may be cut off (a lent GPU's capped call): each failure's report
is appended to $LIVE_REPORT the moment it is known, so a run killed before its summary still
leaves every failure's traceback. Load it with `-p live_report` (tests/ on PYTHONPATH); with
pytest-xdist the controller receives the workers' reports and writes them."""

from __future__ import annotations

import os


def _append(text: str) -> None:
    path = os.environ.get("LIVE_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)


def pytest_runtest_logreport(report) -> None:
    """Failures (and errors in set-up or tear-down), with their tracebacks."""
    if report.failed:
        _append(f"=== FAILED {report.nodeid} ({report.when}, {report.duration:.1f}s)\n{report.longreprtext}\n")


def pytest_warning_recorded(warning_message, when, nodeid, location) -> None:
    """Warnings a test raised (the corpus's CPU expectations that did not hold on the GPU)."""
    _append(f"=== WARNING {nodeid}: {warning_message.message}\n")

"""Exit statuses and the two errors every command raises for them.

0 when a command reached its result (a verdict, whatever it is; a finished run), 1 when a run
started and then stopped on an error (optimize, bench and generate: it can be resumed), 2 for
unusable input (a missing file, an invalid problem, a device, isolation backend or endpoint that
is not available: nothing was started), 3 when the sandbox itself failed (a worker could not
start), 130 on Ctrl-C.
"""

from __future__ import annotations

import json
import sys

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Unusable input: reported on stderr, exit code 2."""


class EnvironmentFailure(Exception):
    """The machine could not run the sandbox: reported on stderr, exit code 3."""


def run_handler(args) -> int:
    """Run the parsed command's handler; its UsageError, EnvironmentFailure or a Ctrl-C become a
    line on stderr and the exit status (and, with --json, one JSON error object on stdout)."""
    try:
        return args.handler(args)
    except UsageError as exc:
        return failed(args, "bad_input", f"kernelopt {args.command}: error: {exc}", str(exc), EXIT_BAD_INPUT)
    except EnvironmentFailure as exc:
        return failed(args, "environment", f"kernelopt {args.command}: sandbox failure: {exc}", str(exc),
                      EXIT_ENVIRONMENT)
    except KeyboardInterrupt:
        return failed(args, "interrupted", "interrupted", "interrupted", EXIT_INTERRUPTED)


def failed(args, kind: str, line: str, message: str, status: int) -> int:
    """Report a command's failure: `line` on stderr, and where the command was asked for JSON,
    one object on stdout that says the same (a script that parses stdout always gets one)."""
    print(line, file=sys.stderr)
    if getattr(args, "json", False):
        print_json_failure(getattr(args, "command", None), kind, message, status)
    return status


def print_json_failure(command: str | None, kind: str, message: str, status: int) -> None:
    """The JSON object a --json command prints on stdout when it fails before its result:
    {"ok": false, "command", "error": bad_input | environment | interrupted, "message", "exit_status"}."""
    print(json.dumps({"ok": False, "command": command, "error": kind, "message": message, "exit_status": status}))
    sys.stdout.flush()

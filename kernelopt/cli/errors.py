"""Exit statuses and the two errors every command raises for them.

0 when a command reached its result (a verdict, whatever it is; a finished run), 1 when a run
started and then stopped on an error (optimize, bench and generate: it can be resumed), 2 for
unusable input (a missing file, an invalid problem, a device, isolation backend or endpoint that
is not available: nothing was started), 3 when the sandbox itself failed (a worker could not
start), 130 on Ctrl-C.
"""

from __future__ import annotations

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
    line on stderr and the exit status."""
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"kernelopt {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except EnvironmentFailure as exc:
        print(f"kernelopt {args.command}: sandbox failure: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED

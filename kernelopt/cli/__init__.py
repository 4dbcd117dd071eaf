"""The `kernelopt` command line: one module per command (evaluate.py is `eval`), the options
they share (options.py), their exit codes and errors (errors.py), and the parser (parser.py).

Nothing else in kernelopt imports this package; it imports the others.
"""

from typing import NoReturn


def main(argv: list[str] | None = None) -> int:
    """The `kernelopt` command (its exit status). Imported on call, so that importing a module of
    this package does not build every command."""
    from kernelopt.cli.parser import main as run

    if argv is not None:
        return run(argv)
    try:
        status = run(argv)
    except Exception:
        # A bug that reached the top: report it as Python would, then leave at once rather than
        # wait at interpreter exit for a thread still in a request to the LLM endpoint or in an
        # evaluation (what was judged is in the store already).
        import traceback

        traceback.print_exc()
        _exit_now(1)
    if status == 130:
        # Interrupted (Ctrl-C), its state saved: the same, without waiting for a request in
        # flight (its answer would be discarded; a resume sends it again).
        _exit_now(status)
    return status


def _exit_now(status: int) -> NoReturn:
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


__all__ = ["main"]

"""The `kernelopt` command line: one module per command (evaluate.py is `eval`), the options
they share (options.py), their exit codes and errors (errors.py), and the parser (parser.py).

Nothing else in kernelopt imports this package; it imports the others.
"""


def main(argv: list[str] | None = None) -> int:
    """The `kernelopt` command (its exit status). Imported on call, so that importing a module of
    this package does not build every command."""
    from kernelopt.cli.parser import main as run

    status = run(argv)
    if argv is None and status == 130:
        # The command line was interrupted (Ctrl-C) and has saved its state: exit now, without
        # waiting at interpreter exit for a request still in flight to the LLM endpoint (its
        # answer would be discarded; a resume sends it again).
        import os
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


__all__ = ["main"]

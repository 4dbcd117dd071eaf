"""The `kernelopt` command line: one module per command (evaluate.py is `eval`), the options
they share (options.py), their exit codes and errors (errors.py), and the parser (parser.py).

Nothing else in kernelopt imports this package; it imports the others.
"""


def main(argv: list[str] | None = None) -> int:
    """The `kernelopt` command (its exit status). Imported on call, so that importing a module of
    this package does not build every command."""
    from kernelopt.cli.parser import main as run

    return run(argv)


__all__ = ["main"]

"""The `kernelopt` command line: one module per command, built into one parser.

Nothing else in kernelopt imports this package; it imports the others.
"""

from kernelopt.cli.parser import main

__all__ = ["main"]

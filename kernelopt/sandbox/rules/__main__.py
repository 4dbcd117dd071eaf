"""`python -m kernelopt.sandbox.rules` prints the table that docs/referee.md carries."""

from kernelopt.sandbox.rules import markdown_table

print(markdown_table())

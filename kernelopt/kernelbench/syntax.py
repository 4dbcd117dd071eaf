"""`ast.parse` that several threads may call at once.

CPython 3.11 keeps the depth counter it checks while turning a parse tree into Python objects in
state the whole interpreter shares (CPython gh-106905, fixed in 3.12 and 3.13). When two threads
parse at once and one of them is switched out mid-conversion (a garbage collection running a
finalizer is enough), the other's check fails with "SystemError: AST constructor recursion depth
mismatch". The reward service judges requests on several threads, so every parse in kernelopt
goes through this lock; a parse takes milliseconds, so serialising them costs nothing measurable.
"""

from __future__ import annotations

import ast
import threading

_AST_CONVERSION = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, one thread at a time; raises what ast.parse raises."""
    with _AST_CONVERSION:
        return ast.parse(source, filename=filename)

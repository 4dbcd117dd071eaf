"""kernelopt's parses hold under threads: the reward service judges requests on several threads,
and CPython 3.11 fails concurrent parses with "AST constructor recursion depth mismatch" when a
thread is switched out mid-conversion (a CI run's reward request answered 500 that way)."""

import sys
import threading
from pathlib import Path

from kernelopt.kernelbench import completion, syntax

SOURCE = Path(completion.__file__).read_text()  # big enough to be switched out mid-conversion


class _RunsBytecodeWhenCollected:
    def __del__(self):
        total = 0
        for i in range(50):  # bytecode, so the interpreter may switch threads here
            total += i


def _parse_while_collecting(parse, threads=4, rounds=150) -> list[str]:
    errors: list[str] = []

    def work():
        for _ in range(rounds):
            cycles = []
            for _ in range(200):
                obj = _RunsBytecodeWhenCollected()
                obj.self = obj  # a cycle: only the collector frees it, at any allocation
                cycles.append(obj)
            del cycles
            try:
                parse(SOURCE)
            except SystemError as exc:
                errors.append(str(exc))
                return

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(old_interval)
    return errors


def test_parses_from_several_threads_never_fail_while_collectors_switch_threads():
    assert _parse_while_collecting(syntax.parse) == []


def test_the_lock_leaves_parse_results_and_errors_as_ast_parse_gives_them():
    assert type(syntax.parse("x = 1").body[0]).__name__ == "Assign"
    try:
        syntax.parse("def broken(:\n", filename="candidate.py")
    except SyntaxError as exc:
        assert exc.filename == "candidate.py"
    else:
        raise AssertionError("a syntax error parsed")

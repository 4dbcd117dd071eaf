"""The command line's shared options: the referee's are generated from EvalOptions, and the
package's layout keeps command modules free of the parser (no import cycle)."""

import ast
import typing
from pathlib import Path

import pytest

from kernelopt.cli.options import JUDGING_FIELDS, RUN_EVAL_FIELDS, judging_options, run_eval_settings
from kernelopt.cli.parser import build_parser
from kernelopt.sandbox import EvalOptions

PACKAGE = Path(__file__).resolve().parents[1] / "kernelopt"


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("command", [["eval", "--reference", "r.py", "--candidate", "c.py"], ["serve"]])
def test_judging_options_default_to_evaloptions_own_defaults(command):
    assert EvalOptions(**judging_options(parse(*command))) == EvalOptions()


def test_every_spelling_reaches_its_field():
    args = parse("eval", "--reference", "r.py", "--candidate", "c.py", "--sandbox", "none",
                 "--timing-precision", "0.2", "--memory-limit", "8G", "--precision-policy", "reject")
    options = EvalOptions(**judging_options(args))
    assert (options.isolation, options.target_precision) == ("none", 0.2)
    assert (options.memory_limit, options.precision_policy) == (8 << 30, "reject")


def test_choices_come_from_the_literal_annotations():
    parser = build_parser()
    eval_parser = parser._subparsers._group_actions[0].choices["eval"]
    choices = {action.dest: action.choices for action in eval_parser._actions if action.choices}
    for name in JUDGING_FIELDS:
        annotation = EvalOptions.model_fields[name].annotation
        if typing.get_origin(annotation) is typing.Literal:
            assert choices[name] == list(typing.get_args(annotation))


def test_an_agent_run_records_only_the_evaluation_options_given():
    assert run_eval_settings(parse("optimize", "p.py")) == {}
    given = run_eval_settings(parse("bench", "--kernelbench", "set", "--timeout", "5", "--build-mode", "exact"))
    assert given == {"timeout": 5.0, "build_mode": "exact"}
    assert set(given) <= set(RUN_EVAL_FIELDS)


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_command_modules_do_not_import_the_parser():
    for path in (PACKAGE / "cli").glob("*.py"):
        if path.name not in ("parser.py", "__init__.py"):
            assert "kernelopt.cli.parser" not in imported_modules(path), path.name


def test_only_the_package_entry_point_imports_the_command_line():
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] == "cli" or path == PACKAGE / "__main__.py":
            continue
        assert not any(m == "kernelopt.cli" or m.startswith("kernelopt.cli.") for m in imported_modules(path)), path

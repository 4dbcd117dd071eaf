"""The package's layout holds: no import cycle between kernelopt modules, kernelopt/agent holds the
search only, kernelbench stays the bottom layer, and `kernelopt --help` does not load torch.

Imports are read from the source (every `import` and `from ... import`, those inside functions
and under TYPE_CHECKING included), so a cycle hidden in a lazy import fails here too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "kernelopt"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def owning_module(name: str) -> str | None:
    """The kernelopt module `name` refers to: itself, or the package that holds the name."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imported_names(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: resolved against this module's package
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            # `from package import submodule` imports the submodule; anything else, the module
            names.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                         for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        targets = {owning_module(name) for name in imported_names(module, path) if name.startswith("kernelopt")}
        graph[module] = {t for t in targets if t and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_kernelopt_modules():
    assert cycles(import_graph()) == []


def test_the_agent_holds_the_search_only():
    """kernelopt/agent imports neither the command line nor the problem-set runs and reports."""
    forbidden = ("kernelopt.cli", "kernelopt.bench")
    for module, targets in import_graph().items():
        if module == "kernelopt.agent" or module.startswith("kernelopt.agent."):
            wrong = {t for t in targets if any(t == f or t.startswith(f + ".") for f in forbidden)}
            assert not wrong, f"{module} imports {sorted(wrong)}"
            assert "report" not in module.rpartition(".")[2], module


def test_kernelbench_is_the_bottom_layer():
    """The problem format imports no other kernelopt package (bench sits above it, not in it)."""
    for module, targets in import_graph().items():
        if module.startswith("kernelopt.kernelbench"):
            assert all(t.startswith("kernelopt.kernelbench") or t == "kernelopt" for t in targets), (module, targets)


def test_building_the_parser_does_not_import_torch():
    code = ("import sys; from kernelopt.cli.parser import build_parser; build_parser(); "
            "heavy = [m for m in ('torch', 'openai') if m in sys.modules]; assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr


def test_strategy_choices_are_the_registry():
    from kernelopt.agent.strategies import STRATEGIES
    from kernelopt.cli.parser import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command")
    for command in ("optimize", "bench"):
        strategy = next(a for a in commands.choices[command]._actions if a.dest == "strategy")
        assert list(strategy.choices) == list(STRATEGIES), command


def test_the_cluster_layer_sits_between_sandbox_and_rewards():
    """kernelopt/cluster drives Evaluators (sandbox) and is driven by rewards and bench: it imports
    none of the layers above it, and the layers below it do not import it."""
    above = ("kernelopt.rewards", "kernelopt.agent", "kernelopt.bench", "kernelopt.tune", "kernelopt.cli")
    below = ("kernelopt.sandbox", "kernelopt.kernelbench")
    for module, targets in import_graph().items():
        if module.startswith("kernelopt.cluster"):
            wrong = {t for t in targets if t.startswith(above)}
            assert not wrong, f"{module} imports {sorted(wrong)}"
        if module.startswith(below):
            assert not any(t.startswith("kernelopt.cluster") for t in targets), (module, targets)


def test_ray_is_imported_only_by_the_cluster_layer_and_lazily():
    """ray is an extra: no module outside kernelopt/cluster imports it, and inside, only in functions."""
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "ray" or n.startswith("ray.") for n in names):
                assert module.startswith("kernelopt.cluster"), f"{module} imports ray"
                assert id(node) not in top_level, f"{module} imports ray at import time"


def test_the_model_layer_sits_beside_bench_and_tune():
    """kernelopt/model (`kernelopt model`) imports only kernelbench, sandbox and agent (and itself);
    only the command line imports it."""
    allowed = ("kernelopt.model", "kernelopt.kernelbench", "kernelopt.sandbox", "kernelopt.agent")
    for module, targets in import_graph().items():
        if module.startswith("kernelopt.model"):
            wrong = {t for t in targets if t != "kernelopt" and not t.startswith(allowed)}
            assert not wrong, f"{module} imports {sorted(wrong)}"
        elif not module.startswith("kernelopt.cli"):
            assert not any(t.startswith("kernelopt.model") for t in targets), (module, targets)


def test_the_worker_imports_none_of_the_host_s_modules():
    """kernelopt/sandbox/worker runs in the sandbox as a package of its own (`worker`, in any
    image with torch): it imports only its own modules, never the host's. Trusted helpers that
    use the host's code (the keeper, sandbox/keeper.py) live beside the host's modules."""
    for module, targets in import_graph().items():
        if module.startswith("kernelopt.sandbox.worker"):
            wrong = {t for t in targets if not t.startswith("kernelopt.sandbox.worker")}
            assert not wrong, f"{module} imports {sorted(wrong)}"

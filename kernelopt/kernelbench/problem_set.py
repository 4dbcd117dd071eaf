"""Problem sets: many problems in KernelBench's order, from where researchers keep them.

Three sources, one result (problems ordered by level, then id):
  - a KernelBench checkout: `KernelBench/level1..4/{id}_{Name}.py` under the given root (or the
    `KernelBench` folder itself);
  - the HuggingFace dataset layout: parquet with columns `code`, `level`, `name`, `problem_id`
    (a local .parquet file, a folder of them, or a dataset id looked up in the local HF cache);
  - any folder of problem files (its `level*` subfolders give levels).
Subsets: `levels` and `ids` (parsed from "1,3,5-9" by `parse_id_ranges`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from kernelopt.kernelbench.problem import Problem, ProblemError, load_problem, problem_from_source

_LEVEL_DIR = re.compile(r"^level_?(\d+)$", re.IGNORECASE)
HF_COLUMNS = ("code", "level", "name", "problem_id")


class ProblemSetError(ValueError):
    """A problem set that cannot be read; the message says which and why."""


@dataclass(frozen=True)
class ProblemSet:
    source: str  # where it came from, for reports
    problems: tuple[Problem, ...]

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self):
        return iter(self.problems)

    def levels(self) -> list[int | None]:
        return sorted({p.level for p in self.problems}, key=lambda level: (level is None, level or 0))


def parse_id_ranges(text: str) -> set[int]:
    """'1,3,5-9' -> {1, 3, 5, 6, 7, 8, 9}."""
    ids: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not match:
            raise ProblemSetError(f"problem ids {text!r}: {part!r} is not a number or a range like 5-9")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            raise ProblemSetError(f"problem ids {text!r}: the range {part!r} runs backwards")
        ids.update(range(low, high + 1))
    return ids


def load_problem_set(location: str | Path, levels: set[int] | None = None, ids: set[int] | None = None) -> ProblemSet:
    """A KernelBench checkout, a parquet file or folder, an HF dataset id, or a problem folder."""
    path = Path(location).expanduser()
    if path.is_file() and path.suffix == ".parquet":
        problems = _from_parquet([path])
    elif path.is_dir() and _parquet_files(path) and not _python_files(path):
        problems = _from_parquet(_parquet_files(path))
    elif path.is_dir():
        problems = _from_folder(_kernelbench_root(path))
    elif re.fullmatch(r"[\w.-]+/[\w.-]+", str(location)):
        problems = _from_parquet(_hf_cached_parquet(str(location)))
    else:
        raise ProblemSetError(f"{location}: not a folder of problems, a KernelBench checkout, a .parquet file "
                              "or a HuggingFace dataset id (owner/name)")
    selected = [p for p in problems if _wanted(p, levels, ids)]
    if not selected:
        raise ProblemSetError(f"{location}: no problems match (levels {sorted(levels) if levels else 'all'}, "
                              f"ids {_describe_ids(ids)}); it holds {len(problems)}")
    return ProblemSet(str(location), tuple(sorted(selected, key=_order)))


def _wanted(problem: Problem, levels: set[int] | None, ids: set[int] | None) -> bool:
    return (not levels or problem.level in levels) and (not ids or problem.problem_id in ids)


def _order(problem: Problem) -> tuple:
    return (problem.level is None, problem.level or 0, problem.problem_id is None, problem.problem_id or 0,
            problem.name)


def _describe_ids(ids: set[int] | None) -> str:
    return "all" if not ids else ",".join(map(str, sorted(ids)))


def _kernelbench_root(path: Path) -> Path:
    """A checkout's root holds KernelBench/level1..; accept the root or that folder."""
    inner = path / "KernelBench"
    return inner if inner.is_dir() and any(_LEVEL_DIR.match(d.name) for d in inner.iterdir()) else path


def _python_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.py"))


def _parquet_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.parquet"))


def _from_folder(folder: Path) -> list[Problem]:
    """Problem files in `folder`'s level subfolders, or, where it has none, directly in it.
    Loose files beside level folders are not problems (KernelBench's `v0.1` branch keeps a
    `test.py` there)."""
    levels = [sub for sub in sorted(folder.iterdir()) if sub.is_dir() and _LEVEL_DIR.match(sub.name)]
    files = [f for sub in levels for f in _python_files(sub)] if levels else _python_files(folder)
    if not files:
        raise ProblemSetError(f"{folder}: no problem files (*.py) in it or in level* subfolders")
    return [_load(path) for path in files if not path.name.startswith("_")]


def _load(path: Path) -> Problem:
    try:
        return load_problem(path)
    except ProblemError as exc:
        raise ProblemSetError(f"{exc} (fix or remove it, or select other problems)") from None


def _from_parquet(files: list[Path]) -> list[Problem]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise ProblemSetError("reading the HuggingFace layout needs pyarrow: pip install 'kernelopt[hf]'") from None
    problems = []
    for file in files:
        table = parquet.read_table(file)
        missing = [c for c in HF_COLUMNS if c not in table.column_names]
        if missing:
            raise ProblemSetError(f"{file}: missing column(s) {', '.join(missing)} (expected {', '.join(HF_COLUMNS)})")
        for row in table.select(list(HF_COLUMNS)).to_pylist():
            problems.append(_problem_from_row(row, file))
    return problems


def _problem_from_row(row: dict, file: Path) -> Problem:
    """A dataset row as if it were KernelBench/level{L}/{id}_{name}.py (names, levels, ids)."""
    name = str(row["name"]).removesuffix(".py")
    stem = name if re.match(r"^\d+_", name) else f"{row['problem_id']}_{name}"
    path = f"{file}#/level{int(row['level'])}/{stem}.py"
    try:
        return problem_from_source(str(row["code"]), path=path)
    except ProblemError as exc:
        raise ProblemSetError(f"{exc} (row {row['problem_id']} of level {row['level']})") from None


def _hf_cached_parquet(dataset: str) -> list[Path]:
    """The parquet files of `owner/name` in the local HuggingFace cache (no network), from its
    newest snapshot."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub")
    snapshots = hub.expanduser() / f"datasets--{dataset.replace('/', '--')}" / "snapshots"
    candidates = [d for d in snapshots.iterdir() if d.is_dir() and _parquet_files(d)] if snapshots.is_dir() else []
    if not candidates:
        raise ProblemSetError(f"dataset {dataset} is not in the local HuggingFace cache ({snapshots.parent}): "
                              f"download it first (huggingface-cli download {dataset} --repo-type dataset) "
                              "or pass a .parquet file")
    return _parquet_files(max(candidates, key=lambda d: d.stat().st_mtime))

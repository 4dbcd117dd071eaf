"""A KernelBench checkout's problem folders, at a chosen git revision, as a clean problem set.

Shared by benchmarks/kernelbench_identity.py and benchmarks/kernelbench_health.py (not a script).
Only the `level{N}` folders are exported (with `git archive`, or copied from the working tree
when no revision is given) into `DEST/KernelBench/level{N}`: some revisions keep other Python
files beside them (KernelBench's `v0.1` branch has `KernelBench/test.py`, which is no problem
file), and kernelopt's problem-set loader refuses a set with any such file in it.

KernelBench's revisions worth knowing (https://github.com/ScalingIntelligence/KernelBench):
  v0     the original sizes (the paper, and most results published before July 2025); the
         problems last changed on 2025-01-10 (b866d6a); branch `v0` = 6500bbc, 2025-07-04
  v0.1   the July 2025 release: sizes changed in 85 of 100 level-1 problems (86 of level 2, 13
         of level 3; mostly up, so every problem runs above 1 ms on a GPU), `torch.randn`
         replaced by `torch.rand`, problems 50 and 97 of level 1 replaced; branch `v0.1` =
         129232e, 2025-07-21
  main   v0.1 sizes; three level-1 files changed since (12, 92, 97: code, not sizes)
"""

from __future__ import annotations

import json

import ast
import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

_LEVEL_DIR = re.compile(r"^level_?(\d+)$", re.IGNORECASE)


class CheckoutError(RuntimeError):
    """The checkout or revision cannot be read; the message says why."""


def _git(checkout: Path, *args: str, binary: bool = False):
    proc = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, check=False)
    if proc.returncode != 0:
        raise CheckoutError(f"git {' '.join(args)} in {checkout}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout if binary else proc.stdout.decode().strip()


def show_file(checkout: Path, ref: str, path: str) -> str:
    """One file of the checkout as it is at `ref` (CheckoutError where it is not there)."""
    return _git(checkout, "show", f"{ref}:{path}")


def _is_git(checkout: Path) -> bool:
    proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--git-dir"], capture_output=True, check=False)
    return proc.returncode == 0


def resolve_ref(checkout: Path, ref: str) -> str:
    """The commit id of `ref` (a branch, tag or commit); `origin/REF` when only that exists (a
    clone keeps KernelBench's `v0` and `v0.1` branches as remote branches)."""
    for name in (ref, f"origin/{ref}"):
        proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return proc.stdout.strip()
    raise CheckoutError(f"{checkout}: no revision {ref!r} (try v0, v0.1, main or a commit id; "
                        "`git fetch origin v0 v0.1` in a shallow or single-branch clone)")


def _level_folders(names: list[str], levels: set[int] | None) -> list[str]:
    found = [n for n in names if _LEVEL_DIR.match(n) and (not levels or int(_LEVEL_DIR.match(n)[1]) in levels)]
    return sorted(found, key=lambda n: int(_LEVEL_DIR.match(n)[1]))


def export_problems(checkout: Path, ref: str | None, levels: set[int] | None, dest: Path) -> dict:
    """Write the checkout's level folders (at `ref`, or as they are in its working tree) to
    DEST/KernelBench/level{N}, replacing what DEST held; returns where they came from:
    {checkout, ref, commit, commit_date, dirty, levels, root}."""
    checkout = checkout.expanduser().resolve()
    if not checkout.exists():
        raise CheckoutError(f"{checkout}: no such folder")
    target = dest / "KernelBench"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    info = {"checkout": str(checkout), "ref": ref, "commit": None, "commit_date": None, "dirty": None}
    if ref is not None:
        commit = resolve_ref(checkout, ref)
        top = _git(checkout, "ls-tree", "--name-only", commit).splitlines()
        prefix = "KernelBench/" if "KernelBench" in top else ""
        names = _git(checkout, "ls-tree", "--name-only", f"{commit}:{prefix}" if prefix else commit).splitlines()
        folders = _level_folders(names, levels)
        if not folders:
            raise CheckoutError(f"{checkout} at {ref}: no level folders {sorted(levels) if levels else ''} in "
                                f"{prefix or 'the root'}")
        archive = _git(checkout, "archive", "--format=tar", commit, *[prefix + f for f in folders], binary=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                if not member.isfile():
                    continue
                relative = Path(member.name).relative_to(prefix) if prefix else Path(member.name)
                path = target / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(tar.extractfile(member).read())
        info.update(commit=commit, commit_date=_git(checkout, "show", "-s", "--format=%cI", commit))
    else:
        root = checkout / "KernelBench" if (checkout / "KernelBench").is_dir() else checkout
        folders = _level_folders([p.name for p in root.iterdir() if p.is_dir()], levels)
        if not folders:
            raise CheckoutError(f"{root}: no level folders {sorted(levels) if levels else ''} (a bare git "
                                "directory needs --ref)")
        for folder in folders:
            shutil.copytree(root / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__"))
        if _is_git(checkout):
            info.update(commit=_git(checkout, "rev-parse", "HEAD"),
                        commit_date=_git(checkout, "show", "-s", "--format=%cI", "HEAD"),
                        dirty=bool(_git(checkout, "status", "--porcelain", "--", str(root))))
    info.update(levels=[int(_LEVEL_DIR.match(f)[1]) for f in folders], root=str(dest))
    return info


def label_of(info: dict) -> str:
    """A short name for the exported revision: the ref, else the short commit, else 'tree'."""
    if info["ref"]:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", info["ref"])
    return info["commit"][:7] if info["commit"] else "tree"


def size_constants(source: str) -> str:
    """The module-level constants of a problem file (its sizes), e.g. 'batch_size=16, dim=16384'."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    parts = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and not isinstance(node.value, (ast.Call, ast.Lambda))):
            parts.append(f"{node.targets[0].id}={ast.unparse(node.value)}")
    return ", ".join(parts)


def read_jsonl_by_key(path: Path) -> dict[str, dict]:
    """The records of a jsonl log by their "key" (a resumed run skips them); torn lines skipped."""
    records = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            records[record["key"]] = record
    return records


def markdown_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")

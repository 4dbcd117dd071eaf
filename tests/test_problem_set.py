"""Problem sets in the KernelBench checkout layout, the HuggingFace parquet layout and plain
folders (problems written here, never KernelBench's files), and KernelBench's metrics."""

from __future__ import annotations

import math

import pytest

from kernelopt.kernelbench.metrics import ProblemOutcome, fast_p_key, summarize
from kernelopt.kernelbench.problem_set import ProblemSetError, load_problem_set, parse_id_ranges

PROBLEM = '''import torch
import torch.nn as nn

scale = {scale}


class Model(nn.Module):
    def forward(self, x):
        return x * scale


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''

# (level, id, name): written out of order on purpose; KernelBench's order is by level, then id.
LAYOUT = [(2, 3, "ScaleB"), (1, 10, "ScaleTen"), (1, 2, "ScaleTwo"), (1, 1, "ScaleOne"), (3, 1, "ScaleC")]


def write_checkout(root):
    for level, problem_id, name in LAYOUT:
        folder = root / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{problem_id}_{name}.py").write_text(PROBLEM.format(scale=problem_id))
    return root


def write_parquet(path, rows=None):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    rows = rows or [{"code": PROBLEM.format(scale=i), "level": lv, "name": f"{i}_{n}", "problem_id": i}
                    for lv, i, n in LAYOUT]
    parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return path


def ids(problem_set):
    return [(p.level, p.problem_id, p.name) for p in problem_set]


def test_a_checkout_is_read_in_kernelbench_order(tmp_path):
    root = write_checkout(tmp_path)
    expected = [(1, 1, "ScaleOne"), (1, 2, "ScaleTwo"), (1, 10, "ScaleTen"), (2, 3, "ScaleB"), (3, 1, "ScaleC")]
    assert ids(load_problem_set(root)) == expected
    assert ids(load_problem_set(root / "KernelBench")) == expected, "the KernelBench folder itself works too"


def test_loose_files_beside_the_level_folders_are_not_problems(tmp_path):
    # KernelBench's v0.1 branch keeps a test script beside its level folders.
    root = write_checkout(tmp_path)
    (root / "KernelBench" / "test.py").write_text("import kernelbench_tools\nrun_everything()\n")
    assert len(load_problem_set(root)) == len(LAYOUT)


def test_subsets_by_level_and_ids(tmp_path):
    root = write_checkout(tmp_path)
    assert ids(load_problem_set(root, levels={1})) == [(1, 1, "ScaleOne"), (1, 2, "ScaleTwo"), (1, 10, "ScaleTen")]
    assert ids(load_problem_set(root, levels={1, 3}, ids=parse_id_ranges("1,5-10"))) == [
        (1, 1, "ScaleOne"), (1, 10, "ScaleTen"), (3, 1, "ScaleC")]
    with pytest.raises(ProblemSetError, match="no problems match.*holds 5"):
        load_problem_set(root, levels={4})


def test_id_ranges_parse_and_bad_ones_say_why():
    assert parse_id_ranges("1,3,5-9") == {1, 3, 5, 6, 7, 8, 9}
    assert parse_id_ranges(" 2 - 4 ,7") == {2, 3, 4, 7}
    for bad, why in (("1,x", "not a number"), ("9-5", "backwards"), ("", "not a number")):
        with pytest.raises(ProblemSetError, match=why):
            parse_id_ranges(bad)


def test_the_huggingface_layout_gives_the_same_set(tmp_path):
    path = write_parquet(tmp_path / "level_all.parquet")
    from_parquet = load_problem_set(path)
    assert ids(from_parquet) == ids(load_problem_set(write_checkout(tmp_path / "co")))
    first = from_parquet.problems[0]
    assert "scale = 1" in first.source and first.path.endswith("#/level1/1_ScaleOne.py")
    assert ids(load_problem_set(path, levels={2})) == [(2, 3, "ScaleB")]


def test_names_without_an_id_prefix_and_a_folder_of_parquet_files(tmp_path):
    rows = [{"code": PROBLEM.format(scale=1), "level": 1, "name": "Plain", "problem_id": 7}]
    write_parquet(tmp_path / "part-0.parquet", rows)
    assert ids(load_problem_set(tmp_path)) == [(1, 7, "Plain")]


def test_the_local_huggingface_cache_is_found_by_dataset_id(tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "datasets--Someone--KernelSet" / "snapshots" / "abc123" / "data"
    snapshot.mkdir(parents=True)
    write_parquet(snapshot / "level_1-00000.parquet")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert len(load_problem_set("Someone/KernelSet")) == len(LAYOUT)
    with pytest.raises(ProblemSetError, match="not in the local HuggingFace cache.*huggingface-cli download"):
        load_problem_set("Someone/Missing")


def test_broken_inputs_are_named(tmp_path):
    rows = [{"code": "import torch\n", "level": 1, "name": "Broken", "problem_id": 4}]
    with pytest.raises(ProblemSetError, match="missing top-level definition.*row 4 of level 1"):
        load_problem_set(write_parquet(tmp_path / "bad.parquet", rows))
    import pyarrow
    import pyarrow.parquet as parquet

    parquet.write_table(pyarrow.Table.from_pylist([{"code": "x", "level": 1}]), tmp_path / "cols.parquet")
    with pytest.raises(ProblemSetError, match="missing column.*name, problem_id"):
        load_problem_set(tmp_path / "cols.parquet")
    folder = write_checkout(tmp_path / "co")
    (folder / "KernelBench" / "level1" / "5_Typo.py").write_text("class Model(:\n")
    with pytest.raises(ProblemSetError, match="5_Typo.py.*syntax error"):
        load_problem_set(folder)
    with pytest.raises(ProblemSetError, match="not a folder of problems"):
        load_problem_set(tmp_path / "nothing-here.txt")


def test_fast_p_counts_missing_problems_as_failures():
    keys = ["a", "b", "c", "d", "e"]
    outcomes = {"a": ProblemOutcome(True, 0.7), "b": ProblemOutcome(True, 1.0), "c": ProblemOutcome(True, 4.0),
                "d": ProblemOutcome(False)}  # e: no result at all
    summary = summarize(keys, outcomes)
    # By hand: correct a, b, c of 5; above 0.5: a, b, c; above 0.8: b, c; above 1 (strictly): c.
    assert summary["n_problems"] == 5 and summary["n_correct"] == 3 and summary["n_missing"] == 1
    assert [summary[fast_p_key(p)] for p in (0, 0.5, 0.8, 1, 1.5, 2)] == [0.6, 0.6, 0.4, 0.2, 0.2, 0.2]
    assert summary["geomean_speedup"] == pytest.approx((0.7 * 1.0 * 4.0) ** (1 / 3))
    assert summary["median_speedup"] == 1.0
    assert set(summary) >= {"fast_0", "fast_0.5", "fast_0.8", "fast_1", "fast_1.5", "fast_2"}


def test_metrics_of_a_set_with_nothing_correct():
    summary = summarize(["a", "b"], {"a": ProblemOutcome(False)})
    assert summary["fast_0"] == 0.0 and summary["geomean_speedup"] is None and summary["median_speedup"] is None
    with pytest.raises(ValueError, match="outside the set"):
        summarize(["a"], {"z": ProblemOutcome(True, 2.0)})
    assert math.isclose(summarize(["a"], {"a": ProblemOutcome(True, 2.0)})["fast_1.5"], 1.0)

from pathlib import Path

import pytest

from kernelopt.kernelbench import ProblemError, load_problem, problem_from_source

VALID = '''
import torch
import torch.nn as nn
n = 4
class Model(nn.Module):
    def forward(self, x):
        return x + 1
def get_inputs():
    return [torch.randn(n)]
def get_init_inputs():
    return []
'''


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_name_id_and_level_come_from_the_path(tmp_path):
    problem = load_problem(write(tmp_path, "level2/19_ReLU.py", VALID))
    assert (problem.name, problem.problem_id, problem.level) == ("ReLU", 19, 2)
    assert len(problem.content_hash) == 64 and problem.source == VALID


def test_plain_file_name_has_no_id_or_level(tmp_path):
    problem = load_problem(write(tmp_path, "my_problem.py", VALID))
    assert (problem.name, problem.problem_id, problem.level) == ("my_problem", None, None)


def test_hash_changes_with_content(tmp_path):
    a = load_problem(write(tmp_path, "a/1_X.py", VALID))
    b = load_problem(write(tmp_path, "b/1_X.py", VALID + "\n# changed\n"))
    assert a.content_hash != b.content_hash


@pytest.mark.parametrize("text, cause", [
    ("def broken(:\n", "syntax error at line 1"),
    (VALID.replace("def get_inputs", "def other_inputs"), "missing top-level definition of get_inputs"),
    (VALID.replace("class Model(nn.Module)", "class Other(nn.Module)"), "missing top-level definition of Model"),
    (VALID.replace("def get_init_inputs", "def nope") .replace("def get_inputs", "def nah"),
     "get_inputs, get_init_inputs"),
    (VALID.replace("class Model(nn.Module):\n    def forward(self, x):\n        return x + 1",
                   "Model = 3"), "`Model` must be a class"),
])
def test_broken_files_get_one_clear_error_naming_file_and_cause(tmp_path, text, cause):
    path = write(tmp_path, "7_Broken.py", text)
    with pytest.raises(ProblemError) as info:
        load_problem(path)
    assert str(path) in str(info.value) and cause in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ProblemError, match="file not found"):
        load_problem(tmp_path / "nope.py")


def test_source_without_a_file():
    problem = problem_from_source(VALID, name="adhoc")
    assert problem.name == "adhoc" and problem.problem_id is None


def test_bundled_examples_load(example):
    for stem in ("1_ReLU", "2_LinearGELU", "3_TinyScale", "4_RedundantSoftmax", "5_GatherRows"):
        assert load_problem(example(stem)).level == 1

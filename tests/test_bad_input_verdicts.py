"""Malformed problems and candidates: a clear refusal or verdict for each, never a crash."""

from __future__ import annotations

import pytest

from test_adversarial import PROBLEMS, describe, evaluate_file, referee_options


RELU_CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
"""

BROKEN_PROBLEMS = {
    "syntax_error": "import torch\nclass Model(torch.nn.Module)\n    pass\n",
    "missing_get_inputs": (
        "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x\n\ndef get_init_inputs():\n    return []\n"
    ),
    "model_not_a_class": (
        "import torch\n\ndef Model():\n    return torch.nn.ReLU()\n\n"
        "def get_inputs():\n    return [torch.randn(4, 4)]\n\ndef get_init_inputs():\n    return []\n"
    ),
    "model_is_a_value": (
        "import torch\n\nModel = torch.nn.ReLU\n\n"
        "def get_inputs():\n    return [torch.randn(4, 4)]\n\ndef get_init_inputs():\n    return []\n"
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN_PROBLEMS))
def test_broken_problem_is_refused(tmp_path, name):
    from kernelopt.kernelbench import ProblemError, load_problem

    path = tmp_path / f"1_{name}.py"
    path.write_text(BROKEN_PROBLEMS[name])
    with pytest.raises(ProblemError) as excinfo:
        load_problem(path)
    assert str(path) in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)


def test_missing_problem_file_is_refused(tmp_path):
    from kernelopt.kernelbench import ProblemError, load_problem

    path = tmp_path / "7_Missing.py"
    with pytest.raises(ProblemError) as excinfo:
        load_problem(path)
    assert str(path) in str(excinfo.value)


FAILING_PROBLEMS = {
    "get_inputs_raises": (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n\n"
        "def get_inputs():\n    raise RuntimeError('problem bug: cannot build inputs')\n\n"
        "def get_init_inputs():\n    return []\n"
    ),
    "get_init_inputs_raises": (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n\n"
        "def get_inputs():\n    return [torch.randn(8, 8)]\n\n"
        "def get_init_inputs():\n    raise RuntimeError('problem bug: cannot build init inputs')\n"
    ),
}


@pytest.mark.parametrize("name", sorted(FAILING_PROBLEMS))
def test_problem_failing_at_runtime_raises_problem_error(tmp_path, name):
    from kernelopt.kernelbench import ProblemError, load_problem

    path = tmp_path / f"1_{name}.py"
    path.write_text(FAILING_PROBLEMS[name])
    load_problem(path)  # statically fine
    with pytest.raises(ProblemError) as excinfo:
        evaluate_file(path, RELU_CANDIDATE, referee_options(timeout=60))
    assert str(path) in str(excinfo.value), str(excinfo.value)


BAD_CANDIDATES = {
    "syntax_error": (
        "compile_error",
        "import torch\nclass ModelNew(torch.nn.Module)\n    def forward(self, x):\n"
        "        return torch.relu(x)\n",
    ),
    "no_model_new": (
        "compile_error",
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n",
    ),
    "model_new_not_a_module": (
        "compile_error runtime_error",
        "import torch\n\ndef ModelNew():\n    return torch.nn.ReLU()\n",
    ),
    "init_raises": (
        "runtime_error",
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        raise ValueError('init failed on purpose')\n\n"
        "    def forward(self, x):\n        return torch.relu(x)\n",
    ),
    "import_raises": (
        "runtime_error compile_error",
        "import torch\nimport torch.nn as nn\n\nraise ImportError('no such kernel library')\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
    ),
    "forward_raises": (
        "runtime_error",
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        raise RuntimeError('forward failed on purpose')\n",
    ),
    "wrong_init_signature": (
        "runtime_error compile_error",
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, a, b, c):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return torch.relu(x)\n",
    ),
    "wrong_output_shape": (
        "incorrect",
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return torch.relu(x).t().contiguous()\n",
    ),
    "wrong_output_count": (
        "incorrect rejected",
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        y = torch.relu(x)\n        return y, y.clone()\n",
    ),
    "returns_none": (
        "rejected incorrect runtime_error",
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return None\n",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_CANDIDATES))
def test_bad_candidate_verdict(name):
    expected, source = BAD_CANDIDATES[name]
    result = evaluate_file(PROBLEMS / "1_ReLU.py", source, referee_options(timeout=60))
    assert result.status in expected.split(), f"expected {expected}\n{describe(result)}"
    assert not result.correct
    assert result.speedup is None or result.status == "correct", describe(result)
    if name in ("init_raises", "forward_raises", "import_raises"):
        # The candidate's own error must reach whoever reads the verdict.
        text = result.message + result.candidate_output
        assert "on purpose" in text or "no such kernel library" in text, describe(result)
        # Its traceback names the candidate's lines, and none of the harness's own.
        assert "candidate.py" in result.message and "sandbox/worker" not in result.message, result.message

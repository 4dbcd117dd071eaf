"""Shared fixtures. GPU tests carry the `gpu` marker and skip without CUDA."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "level1"


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_bwrap = pytest.mark.skip(reason="needs bubblewrap (scripts/setup.sh installs it)")
    has_cuda, has_bwrap = _cuda_available(), shutil.which("bwrap") is not None
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "bwrap" in item.keywords and not has_bwrap:
            item.add_marker(skip_bwrap)


@pytest.fixture
def example():
    """Path of an example problem by file stem, e.g. example('1_ReLU')."""
    return lambda stem: EXAMPLES / f"{stem}.py"


@pytest.fixture
def fast_options():
    """Evaluation options that keep CPU tests quick without weakening any check."""
    from kernelopt.sandbox import EvalOptions

    def make(**overrides):
        settings = dict(device="cpu", timing_budget=2.0, min_timed_calls=5, timeout=120)
        settings.update(overrides)
        return EvalOptions(**settings)

    return make

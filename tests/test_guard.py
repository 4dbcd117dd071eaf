"""What the worker checks about its own interpreter before and after a candidate's code runs:
interceptors of the harness's steps (kernelopt/sandbox/worker/main.py) and replaced or added
functions (worker/guard.py). These run in the test's own process and undo what they do."""

from __future__ import annotations

import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from kernelopt.sandbox.worker.guard import Guard
from kernelopt.sandbox.worker.turns import harness_only as _harness_only, interceptors


class _Counting(TorchFunctionMode):
    calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        _Counting.calls += 1
        return func(*args, **(kwargs or {}))


class _Passing(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_nothing_intercepts_in_a_clean_interpreter():
    assert interceptors() == []


def test_a_torch_function_mode_left_on_its_stack_is_found():
    with _Counting():
        assert interceptors() == ["a torch-function mode"]
    assert interceptors() == []


def test_a_dispatch_mode_left_on_its_stack_is_found():
    with _Passing():
        assert interceptors() == ["a torch dispatch mode"]


def test_profile_and_trace_functions_are_found():
    def hook(*args):
        return None

    sys.setprofile(hook)
    try:
        found = interceptors()
    finally:
        sys.setprofile(None)
    assert found == ["a profile function"]
    previous = sys.gettrace()  # coverage tools may trace the test run itself
    sys.settrace(hook)
    try:
        assert "a trace function" in interceptors()
    finally:
        sys.settrace(previous)


def test_the_harness_steps_run_with_torch_function_handling_off():
    x = torch.ones(4)
    _Counting.calls = 0
    with _Counting():
        with _harness_only():
            x.clone().sum()
        assert _Counting.calls == 0
        x.clone()
    assert _Counting.calls == 1


def test_a_method_added_to_a_watched_class_is_reported_and_a_replaced_one_too():
    guard = Guard()
    original_relu = torch.relu
    try:
        torch.Tensor.copy_ = lambda self, other: self  # shadows the C base class's copy_
        torch.relu = lambda x: x
        patched = guard.patched_names()
    finally:
        del torch.Tensor.copy_
        torch.relu = original_relu
    assert "torch.Tensor.copy_ (added)" in patched
    assert "torch.relu" in patched
    assert Guard().patched_names() == []


def test_a_flag_name_made_up_in_the_candidates_report_is_recorded_as_a_violation():
    from pydantic import ValidationError

    from kernelopt.sandbox.rules import known_flag as _known_flag
    from kernelopt.sandbox.results import FLAGS, EvalResult

    assert _known_flag("patched_runtime") == "patched_runtime"
    assert _known_flag("speedup_is_real") == "violation" and _known_flag(None) == "violation"
    assert "violation" in FLAGS and "output_ignores_input" in FLAGS
    with pytest.raises(ValidationError):  # a verdict only ever carries known flags
        EvalResult(status="rejected", flags=["speedup_is_real"])

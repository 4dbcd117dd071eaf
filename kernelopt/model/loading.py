"""A model file (KernelBench format) loaded in this process, and its constructor calls recorded.

The user's own model runs here, unsandboxed, for profiling and extraction (as it does in any
script of theirs); candidates for it are only ever run by the referee, in its sandbox.
"""

from __future__ import annotations

from typing import Any

import importlib.util
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelopt.kernelbench import Problem, ProblemError, load_problem

_serial = itertools.count()


@dataclass
class LoadedModel:
    problem: Problem
    namespace: dict          # the executed file's globals
    model: Any               # Model(*get_init_inputs()), as constructed (a torch.nn.Module)
    init_inputs: list
    inputs: list


def load_model(path: str | Path, device: str = "cpu", seed: int = 0) -> LoadedModel:
    """Executes the file, builds `Model(*get_init_inputs())` and one input set, under `seed`."""
    import torch

    problem = load_problem(path)
    namespace = execute(problem)
    try:
        torch.manual_seed(seed)
        init_inputs = list(namespace["get_init_inputs"]())
        torch.manual_seed(seed)
        model = namespace["Model"](*init_inputs)
        torch.manual_seed(seed + 1)
        inputs = [to_device(x, device) for x in namespace["get_inputs"]()]
        model = model.to(device)
    except Exception as exc:
        raise ProblemError(problem.path, f"building the model or its inputs raised {type(exc).__name__}: {exc}") from exc
    return LoadedModel(problem, namespace, model, init_inputs, inputs)


def execute(problem: Problem) -> dict:
    """The file's globals after running it as a module of its own (classes get a real module)."""
    name = f"kernelopt_model_{next(_serial)}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None  # a spec without a loader is always made
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(Path(problem.path).resolve())
    sys.modules[name] = module
    try:
        exec(compile(problem.source, problem.path, "exec"), module.__dict__)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ProblemError(problem.path, f"running the file raised {type(exc).__name__}: {exc}") from exc
    return module.__dict__


def to_device(value, device: str):
    return value.to(device) if hasattr(value, "to") and hasattr(value, "shape") else value


@dataclass
class InitCall:
    cls: type
    args: tuple
    kwargs: dict


def record_constructors(loaded: LoadedModel, seed: int = 0) -> dict[str, InitCall]:
    """Module path -> the constructor call that made that submodule: the model is built once
    more (same seed) with the `__init__` of every class seen in it wrapped to record its first
    (outermost) call per instance. A submodule made otherwise (copied, created by a factory
    that bypasses `__init__`) has no entry."""
    import torch

    classes = {type(m) for m in loaded.model.modules()}
    calls: dict[int, InitCall] = {}
    keep: list = []
    patched = []

    def wrap(cls):
        inner = cls.__init__

        def __init__(self, *args, **kwargs):
            if id(self) not in calls:
                calls[id(self)] = InitCall(type(self), args, kwargs)
                keep.append(self)
            inner(self, *args, **kwargs)
        return __init__

    for cls in classes:
        patched.append((cls, cls.__dict__.get("__init__")))
        cls.__init__ = wrap(cls)
    try:
        torch.manual_seed(seed)
        again = loaded.namespace["Model"](*loaded.init_inputs)
    finally:
        for cls, original in reversed(patched):
            if original is None:
                del cls.__init__
            else:
                cls.__init__ = original
    for call in calls.values():   # modules given to a constructor (nn.Sequential's) as their own calls
        call.args = tuple(_as_call(a, calls) for a in call.args)
        call.kwargs = {k: _as_call(v, calls) for k, v in call.kwargs.items()}
    return {path: calls[id(m)] for path, m in again.named_modules() if id(m) in calls}


def _as_call(value, calls: dict):
    if isinstance(value, (list, tuple)):
        return type(value)(_as_call(v, calls) for v in value)
    return calls.get(id(value), value) if hasattr(value, "named_modules") else value

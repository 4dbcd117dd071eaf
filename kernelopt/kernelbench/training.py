"""Training problems: the forward and backward pass judged as one step (`PASS`, `--pass`).

A problem asks for training with a literal `PASS = "backward"` or `PASS = "both"` at top level
(or the referee's `--pass` option); the default is "forward", KernelBench's. The step is judged
as a plain problem derived from the file, so every rule of the referee applies to it unchanged:

- its `Model` runs the file's model forward on the inputs (floating-point ones made leaves that
  require grad), then backward for an upstream gradient, and returns the outputs, the gradients
  of the floating-point inputs and those of every parameter, in order;
- its `get_inputs()` returns the file's inputs plus the upstream gradient: one flat tensor of
  fresh random values drawn under the referee's secret seed like every input (not ones, not
  known in advance), cut into one piece per floating-point output. Its size comes from the
  outputs' shapes, found once per input signature by running the model on meta tensors;
- a candidate's `ModelNew` is wrapped the same way, so it must produce the same outputs and,
  through autograd or a `torch.autograd.Function` with its own backward, the same gradients for
  the same parameters (in the same order, as KernelBench's seeded construction makes them).

The wrapper runs in each side's own worker: nothing of it is trusted. Whatever the candidate's
process returns is compared by the host like any output, so a backward that ignores the upstream
gradient, gradients cached across calls or accumulated from the last call, are wrong outputs.
"""

from __future__ import annotations

import ast

PASS_NAME = "PASS"
PASSES = ("forward", "backward", "both")


class PassError(ValueError):
    """A `PASS` declaration that cannot be used; the message says what to change."""


def declared_pass(tree: ast.Module) -> str:
    """The pass a parsed problem file asks for: its literal `PASS`, or "forward"."""
    found = "forward"
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == PASS_NAME for t in node.targets):
            try:
                found = ast.literal_eval(node.value)
            except ValueError:
                raise PassError(f"{PASS_NAME} must be a literal string: one of {', '.join(PASSES)}") from None
            if found not in PASSES:
                raise PassError(f"{PASS_NAME} = {found!r}: say one of {', '.join(map(repr, PASSES))}")
    return found


def effective_pass(option: str, declared: str) -> str:
    """The pass judged: the option's, unless it is "auto" (the problem's declaration)."""
    return declared if option == "auto" else option


_STEP = '''

# --- kernelopt: one training step of the model above (kernelopt/kernelbench/training.py) ---
import torch as _kernelopt_torch


def _kernelopt_tuple(result):
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _kernelopt_differentiable(tensor):
    return isinstance(tensor, _kernelopt_torch.Tensor) and (tensor.is_floating_point() or tensor.is_complex())


class _KerneloptTrainingStep(_kernelopt_torch.nn.Module):
    """The forward, then the backward for the upstream gradient (the last input): the outputs,
    the gradients of the floating-point inputs, then those of the parameters."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        *inputs, upstream = args
        with _kernelopt_torch.enable_grad():
            leaves = [x.detach().requires_grad_(True) if _kernelopt_differentiable(x) else x for x in inputs]
            parameters = [p for p in self.model.parameters() if p.requires_grad]
            for p in parameters:
                p.grad = None
            outputs = _kernelopt_tuple(self.model(*leaves))
            tensors, grads, at = [], [], 0
            for out in outputs:
                if _kernelopt_differentiable(out) and out.requires_grad:
                    tensors.append(out)
                    grads.append(upstream[at:at + out.numel()].reshape(out.shape).to(out.dtype))
                    at += out.numel()
            if not tensors:
                raise RuntimeError("kernelopt: no output of the model is a floating-point tensor that requires grad, "
                                   "so there is no backward pass to judge: judge the forward pass (--pass forward)")
            _kernelopt_torch.autograd.backward(tensors, grads)
        gradients = [x.grad if x.grad is not None else _kernelopt_torch.zeros_like(x)
                     for x in leaves if isinstance(x, _kernelopt_torch.Tensor) and x.requires_grad]
        gradients += [p.grad if p.grad is not None else _kernelopt_torch.zeros_like(p) for p in parameters]
        for p in parameters:
            p.grad = None
        return (*(o.detach() if isinstance(o, _kernelopt_torch.Tensor) else o for o in outputs), *gradients)
'''

_PROBLEM = _STEP + '''

_kernelopt_forward_model = Model
_kernelopt_forward_inputs = get_inputs
_kernelopt_upstream_sizes = {}


def _kernelopt_upstream_size(inputs):
    """How many values the upstream gradient needs: the differentiable outputs' elements, from
    the model run on meta tensors (no values, no random numbers drawn), once per signature."""
    key = tuple((tuple(x.shape), str(x.dtype)) if isinstance(x, _kernelopt_torch.Tensor) else repr(x)
                for x in inputs)
    if key not in _kernelopt_upstream_sizes:
        with _kernelopt_torch.random.fork_rng(devices=[]), _kernelopt_torch.device("meta"):
            model = _kernelopt_forward_model(*get_init_inputs())
            outputs = _kernelopt_tuple(model(*[x.to("meta") if isinstance(x, _kernelopt_torch.Tensor) else x
                                                for x in inputs]))
        _kernelopt_upstream_sizes[key] = sum(o.numel() for o in outputs if _kernelopt_differentiable(o))
    return _kernelopt_upstream_sizes[key]


def get_inputs():
    inputs = list(_kernelopt_forward_inputs())
    return [*inputs, _kernelopt_torch.randn(_kernelopt_upstream_size(inputs))]


class Model(_KerneloptTrainingStep):
    def __init__(self, *init_inputs):
        super().__init__(_kernelopt_forward_model(*init_inputs))
'''

_CANDIDATE = _STEP + '''

_kernelopt_candidate_model = ModelNew


class ModelNew(_KerneloptTrainingStep):
    def __init__(self, *init_inputs):
        super().__init__(_kernelopt_candidate_model(*init_inputs))
'''


def problem_source(source: str) -> str:
    """The problem file as its training step: a plain problem whose outputs are the outputs and
    every gradient, and whose last input is the upstream gradient."""
    return source.rstrip() + "\n" + _PROBLEM


def candidate_source(source: str) -> str:
    """A candidate file with its ModelNew wrapped in the same step."""
    return source.rstrip() + "\n" + _CANDIDATE

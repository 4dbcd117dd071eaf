"""Inputs and outputs as the worker handles them: seeding, digests of init inputs, the checks
that an output is a plain tensor, and the description of a call's outputs the host reads
(`describe_outputs`).

Nothing here is trusted when it runs in a candidate's process: the host takes every value the
verdict uses from memory it reads itself (sandbox/calls.py). These are the honest worker's steps,
bound at import so that a program's ordinary patches do not break them by accident.
"""

from __future__ import annotations

from collections.abc import Callable

import hashlib
import random

import torch

_tensor_type = torch.Tensor
_copy, _view, _reshape, _narrow = torch.Tensor.copy_, torch.Tensor.view, torch.Tensor.reshape, torch.Tensor.narrow
_manual_seed = torch.manual_seed
_random_seed = random.seed
_numpy_seed: Callable[..., None] | None
try:
    import numpy

    _numpy_seed = numpy.random.seed
except ImportError:
    _numpy_seed = None


class OutputError(ValueError):
    """The forward returned something that is not a plain tensor or a sequence of them."""


_python_key = torch._C.DispatchKey.Python
_dispatch_keys = torch._C._dispatch_keys
_functorch_wrapped: Callable[..., bool] | None
try:
    _functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
except AttributeError:  # pragma: no cover - older torch
    _functorch_wrapped = None


def not_plain(x) -> str | None:
    """Why `x` is not a plain, dense torch.Tensor (None when it is): a subclass (`type(x) is
    torch.Tensor`, which no `__class__` trick fakes, is checked before anything else of x is
    read), a sparse, nested or meta tensor, a tensor carrying the Python dispatch key (a
    subclass's key on a plain type) or a functorch wrapper. Only then may the harness touch it."""
    kind = type(x)
    if kind is not _tensor_type:
        return f"a {kind.__qualname__}" + (" (a torch.Tensor subclass)" if issubclass(kind, _tensor_type) else "")
    if x.layout is not torch.strided:
        return f"a {x.layout} tensor"
    if x.is_nested:
        return "a nested tensor"
    if x.device.type == "meta":
        return "a meta tensor"
    if _dispatch_keys(x).has(_python_key):
        return "a tensor that dispatches to Python"
    if _functorch_wrapped is not None and _functorch_wrapped(x):
        return "a functorch-wrapped tensor"
    return None


def set_seed(seed: int) -> None:
    """Seed every generator a problem or model might draw from (KernelBench seeds torch), with
    the functions as they were before any program code ran."""
    _manual_seed(seed)
    _random_seed(seed)
    if _numpy_seed is not None:
        _numpy_seed(seed % (1 << 32))


def flatten_outputs(output) -> list[torch.Tensor]:
    """The forward's result as a flat list of plain tensors, or OutputError.

    `type(x) is torch.Tensor` rejects subclasses (lazy tensors, __torch_function__ tricks):
    `type()` cannot be faked the way `__class__` can.
    """
    if type(output) is _tensor_type:
        problem = not_plain(output)
        if problem:
            raise OutputError(f"output must be a plain, dense torch.Tensor, got {problem}")
        return [output]
    if type(output) in (tuple, list):
        flat: list[torch.Tensor] = []
        for item in output:
            flat.extend(flatten_outputs(item))
        return flat
    raise OutputError(f"output must be a torch.Tensor or a tuple/list of them, got {type(output).__name__}")


def laid_out(output):
    """The forward's result with every plain tensor that is not contiguous (a transpose, a
    broadcast, a slice with gaps, channels-last) made contiguous, in the same nesting; anything
    else as it was (for `flatten_outputs` to judge). Done inside the call's window where the host
    reads outputs from memory (the other transports copy them out contiguously in the window
    anyway): laying out values is work, and the host does none of a program's."""
    if type(output) is _tensor_type:
        return output.contiguous() if not_plain(output) is None and not output.is_contiguous() else output
    if type(output) in (tuple, list):
        return type(output)(laid_out(item) for item in output)
    return output


def tensor_storage_span(t: torch.Tensor) -> tuple[int, int] | None:
    """[start, end) byte addresses the tensor's storage occupies, or None when empty."""
    storage = t.untyped_storage()
    if storage.nbytes() == 0:
        return None
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def aliases(outputs: list[torch.Tensor], inputs) -> bool:
    """Whether any output shares storage with any input tensor."""
    input_spans = [s for s in (tensor_storage_span(t) for t in tensors_in(inputs)) if s]
    for out in outputs:
        span = tensor_storage_span(out)
        if span and any(span[0] < end and start < span[1] for start, end in input_spans):
            return True
    return False


def tensors_in(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in tensors_in(item)]
    return []


def digest(obj) -> str:
    """SHA-256 of the values (and dtypes, shapes) of a nest of tensors and Python scalars."""
    h = hashlib.sha256()
    _digest_into(h, obj)
    return h.hexdigest()


def _digest_into(h, obj) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy())  # the buffer itself: no copy of gigabyte inputs
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for item in obj:
            _digest_into(h, item)
    else:
        h.update(f"V{type(obj).__name__}:{obj!r}".encode())


def describe_outputs(output, inputs, transport: str, slot=None) -> tuple[dict, list]:
    """What the host needs to take a call's outputs itself: their structure, each tensor's
    shape, dtype and device, and either where its values lie in this process's memory (MEMORY:
    the address of its first element and its strides, read by the host through /proc once the
    group is frozen; contiguous, as `laid_out` made them, or the host refuses them), where they
    were copied in the device output slot `slot` (DEVICE: offset and bytes; the keeper copies
    them out once the group is frozen), or its values as the frame's blobs (FRAME: a container;
    DEVICE when they do not fit the slot: the host sizes the next slot by the bytes that came). Whatever a program makes this say, the host compares
    the values it takes, so a lie can only cost it."""
    from .commands import DEVICE, MEMORY
    from .transfer import structure

    tensors = flatten_outputs(output)
    described: dict = {"structure": structure(output), "aliases_input": aliases(tensors, inputs),
                       "meta": [[list(t.shape), str(t.dtype), str(t.device)] for t in tensors]}
    if transport == MEMORY:
        described["spans"] = [[t.data_ptr(), list(t.stride())] for t in tensors]
        return described, []
    if transport == DEVICE and slot is not None and sum(_slot_extent(t) for t in tensors) <= slot.size:
        described["slot_spans"] = _into_slot(tensors, slot.tensor())
        return described, []
    return described, [_values(t) for t in tensors]


_SLOT_ALIGN = 256  # every output starts where any dtype's view of the slot is aligned


def _slot_extent(t: torch.Tensor) -> int:
    nbytes = t.numel() * t.element_size()
    return nbytes + (-nbytes) % _SLOT_ALIGN


def _into_slot(tensors: list[torch.Tensor], slot: torch.Tensor) -> list[list[int]]:
    """Copy each output, contiguous, into the device output slot: [offset, bytes] of each."""
    spans, offset = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if nbytes:
            _copy(_reshape(_view(_narrow(slot, 0, offset, nbytes), t.dtype), t.shape), t.detach())
        spans.append([offset, nbytes])
        offset += _slot_extent(t)
    return spans


def _values(t: torch.Tensor):
    """A tensor's values as one contiguous buffer on the CPU (a numpy view, not a bytes copy)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy() if flat.numel() else b""

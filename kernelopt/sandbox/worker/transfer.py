"""Inputs as bytes, and the structure of outputs: what crosses between the workers.

The reference worker makes every input set (the problem's `get_inputs` under the host's seed)
and packs it: one flat buffer of tensor bytes plus a JSON-able spec of the nest (tensors,
Python scalars, lists and tuples). The host hands the buffer to each worker, one call at a
time, and the worker unpacks it on its device (contiguous CPU tensors as views of the bytes,
the rest as fresh copies). So the candidate's process
never runs input generation, and the inputs of a call do not exist in it before that call.

Runs inside the sandbox: standard library and torch only, bound before any program code runs.
"""

from __future__ import annotations

import torch

ALIGN = 64  # every tensor's bytes start on a cache line of the buffer (and each set on one of the outbox)
_tensor_type = torch.Tensor
_frombuffer = torch.frombuffer
_empty_strided = torch.empty_strided
_empty = torch.empty
_uint8 = torch.uint8
_copy = torch.Tensor.copy_
_to = torch.Tensor.to
_contiguous = torch.Tensor.contiguous
_view = torch.Tensor.view
_reshape = torch.Tensor.reshape
_requires_grad = torch.Tensor.requires_grad_
_narrow = torch.Tensor.narrow
_permute = torch.Tensor.permute
_as_strided = torch.Tensor.as_strided
_SCALARS = (bool, int, float, str, type(None))
_DTYPES = {str(d): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
)}


class TransferError(ValueError):
    """Inputs that cannot be packed (an object that is not a tensor, scalar or sequence), or a
    spec that does not describe the buffer it came with."""


def pack(inputs) -> tuple[object, bytes]:
    """(spec, buffer) of an input nest; tensors leave in their values, dtype, shape and (for
    dense layouts) strides, on the CPU. Each tensor's bytes are copied once, straight into the
    buffer (gigabyte inputs: a copy per tensor and another to join them made a problem whose
    inputs are a third of the worker's memory limit not fit)."""
    spec, placed, size = plan(inputs)
    buffer = bytearray(size)
    fill(placed, buffer, 0)
    return spec, buffer  # type: ignore[return-value]  # bytes-like; a bytes() copy would double it


def plan(inputs) -> tuple[object, list[tuple[int, torch.Tensor]], int]:
    """(spec, placed, size) of an input nest: each tensor's contiguous CPU values and its offset
    in a packed buffer of `size` bytes (pack, or fill into a buffer of the caller's)."""
    placed: list[tuple[int, torch.Tensor]] = []
    size = [0]
    spec = _plan(inputs, placed, size)
    return spec, placed, size[0]


def fill(placed: list[tuple[int, torch.Tensor]], buffer, at: int) -> None:
    """Copy the planned tensors into the writable `buffer`, the packed set starting at byte `at`."""
    for offset, values in placed:
        raw = _view(_reshape(values, (-1,)), _uint8)
        _copy(_frombuffer(buffer, dtype=_uint8, count=raw.numel(), offset=at + offset), raw)


def _plan(obj, placed: list[tuple[int, torch.Tensor]], size: list[int]):
    """The spec of `obj`; each tensor's contiguous CPU values and where they go in the buffer."""
    if type(obj) is _tensor_type or isinstance(obj, torch.Tensor):
        t = obj.detach()
        if str(t.dtype) not in _DTYPES:
            raise TransferError(f"inputs of dtype {t.dtype} are not supported")
        dense = t.is_contiguous() or _non_overlapping_dense(t)
        # A dense layout's values in its memory order (a transpose's as its storage holds them),
        # so that the worker unpacks it as a view with the same strides: a copy into that layout
        # inside the window would be the harness's work, and a program's to skip.
        in_memory_order = dense and not t.is_contiguous()
        values = _contiguous(_to(_permute(t, memory_order(list(t.shape), list(t.stride()))) if in_memory_order else t,
                                 "cpu"))
        nbytes = values.numel() * values.element_size()
        offset = size[0] + (-size[0]) % ALIGN
        if nbytes:
            placed.append((offset, values))
        size[0] = offset + nbytes
        return {"tensor": {"offset": offset, "nbytes": nbytes, "dtype": str(t.dtype),
                           "shape": list(t.shape), "stride": list(t.stride()) if dense else None,
                           "grad": bool(obj.requires_grad)}}
    if isinstance(obj, _SCALARS):
        return {"value": obj}
    if type(obj) in (list, tuple):
        return {type(obj).__name__: [_plan(item, placed, size) for item in obj]}
    raise TransferError(f"get_inputs() returned a {type(obj).__name__}: inputs must be tensors, Python "
                        "scalars or lists/tuples of them")


def contiguous_layout(shape: list[int], stride: list[int]) -> bool:
    """Whether strides lay a shape out row-major with no gaps (a dim of one element takes any
    stride, and a shape with no elements any strides), as torch's is_contiguous says."""
    if len(shape) != len(stride):
        return False
    if 0 in shape:
        return True
    expected = 1
    for size, step in zip(reversed(shape), reversed(stride)):
        if size != 1 and step != expected:
            return False
        expected *= size
    return True


def memory_order(shape: list[int], stride: list[int]) -> list[int]:
    """The dims of a dense layout from the outermost in memory to the innermost (largest stride
    first; dims of one element, whose stride says nothing, last): the permutation under which
    the layout is contiguous."""
    return sorted(range(len(shape)), key=lambda d: (-stride[d] if shape[d] != 1 else 0, d))


def _non_overlapping_dense(t: torch.Tensor) -> bool:
    """A permutation of a contiguous layout (a transpose, channels-last): reproducible exactly."""
    dims = sorted(range(t.dim()), key=lambda d: t.stride(d))
    expected = 1
    for d in dims:
        if t.size(d) != 1 and t.stride(d) != expected:
            return False
        expected *= t.size(d)
    return True


def unpack(spec, buffer, device: torch.device):
    """The input nest from `spec` over `buffer` (a writable buffer: the host's input slot, or
    the bytes of a frame; or a flat uint8 tensor: a device slot the keeper filled). A contiguous
    tensor on the buffer's own device is a view of it (the host writes each call's inputs
    afresh, so nothing of another call is in it); any other tensor is a fresh copy on `device`."""
    if not isinstance(spec, dict) or len(spec) != 1:
        raise TransferError("malformed input spec")
    (kind, value), = spec.items()
    if kind == "value":
        if not isinstance(value, _SCALARS):
            raise TransferError("malformed scalar in the input spec")
        return value
    if kind in ("list", "tuple"):
        items = [unpack(item, buffer, device) for item in value]
        return items if kind == "list" else tuple(items)
    if kind == "tensor":
        return _unpack_tensor(value, buffer, device)
    raise TransferError(f"unknown input kind {kind!r}")


def packed_tensors(spec, buffer) -> list[torch.Tensor]:
    """Each tensor of the nest `spec` describes, as a view of `buffer` in its shape: its values as
    packed, contiguous, whatever layout `unpack` gives the tensor (the host changes them in
    place for the every-element check's copies, sandbox/perturbation.py)."""
    if not isinstance(spec, dict) or len(spec) != 1:
        raise TransferError("malformed input spec")
    (kind, value), = spec.items()
    if kind in ("list", "tuple"):
        return [t for item in value for t in packed_tensors(item, buffer)]
    return [_packed_values(value, buffer)] if kind == "tensor" else []


def _packed_values(meta: dict, buffer) -> torch.Tensor:
    """One tensor's packed values, a contiguous view of `buffer`: in the tensor's shape, or for a
    dense layout packed in its memory order, in that order's shape (a transpose's untransposed
    matrix: its elements and their neighbours as in memory)."""
    dtype_name = meta.get("dtype")
    dtype = _DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    shape, offset, nbytes = meta.get("shape"), meta.get("offset"), meta.get("nbytes")
    if dtype is None or not isinstance(shape, list) or not isinstance(offset, int) or not isinstance(nbytes, int):
        raise TransferError("malformed tensor in the input spec")
    if offset < 0 or offset + nbytes > len(buffer):
        raise TransferError("a tensor of the input spec lies outside its buffer")
    on_device = type(buffer) is _tensor_type
    if not nbytes:
        flat = _empty(0, dtype=dtype, device=buffer.device if on_device else "cpu")
    elif on_device:
        flat = _view(_narrow(buffer, 0, offset, nbytes), dtype)
    else:
        flat = _view(_frombuffer(buffer, dtype=_uint8, count=nbytes, offset=offset), dtype)
    stride = meta.get("stride")
    if isinstance(stride, list) and len(stride) == len(shape) and not contiguous_layout(shape, stride):
        shape = [shape[d] for d in memory_order(shape, stride)]
    return _reshape(flat, shape)


def _unpack_tensor(meta: dict, buffer, device: torch.device) -> torch.Tensor:
    """One tensor: a view of the buffer with the packed layout (a dense layout's strides over its
    memory order) where the buffer is on `device`, else a fresh copy there."""
    packed = _packed_values(meta, buffer)
    shape, dtype, stride = meta["shape"], packed.dtype, meta.get("stride")
    values = _as_strided(packed, shape, stride) if stride is not None and packed.numel() > 1 else _reshape(packed, shape)
    if values.device.type == device.type:
        if meta.get("grad"):
            _requires_grad(values, True)
        return values
    if stride is not None:
        target = _empty_strided(shape, stride, dtype=dtype, device=device)
    else:
        target = _empty(shape, dtype=dtype, device=device)
    _copy(target, values)  # the fresh copy: the call never sees the shared buffer
    if meta.get("grad"):
        _requires_grad(target, True)
    return target


def structure(output) -> str:
    """The output's nesting as a string ("T", "(T,T)", "[T,(T)]"), for the host to compare
    with the reference's exactly: a tensor is not a one-element list of it."""
    if type(output) is _tensor_type:
        return "T"
    if type(output) is tuple:
        return "(" + ",".join(structure(item) for item in output) + ")"
    if type(output) is list:
        return "[" + ",".join(structure(item) for item in output) + "]"
    return "?" + type(output).__name__

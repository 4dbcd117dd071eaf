"""Inputs, outputs, fingerprints and the timed call, as the worker performs them.

Everything the timing depends on is bound at import of this module, which happens before the
candidate is imported, so the candidate cannot swap the clock or the synchronisation.
"""

from __future__ import annotations

from collections.abc import Callable

import hashlib
import io
import math
import random
import time
import warnings

import torch

_perf_ns = time.perf_counter_ns
_tensor_type = torch.Tensor
_save = torch.save
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


class HarnessObjectError(ValueError):
    """Something the harness is about to copy, fingerprint, hash or serialize (its own inputs,
    copies, caches) is not the plain object the harness made: the program replaced or changed it."""


# The kept copies are tensors over immutable bytes that only the harness reads.
warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning)
_ALL_DTYPES = {str(d): d for d in vars(torch).values() if isinstance(d, torch.dtype)}
_SCALAR_TYPES = (int, float, bool, complex, str, type(None))
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


def check_plain(obj, what: str) -> None:
    """HarnessObjectError unless `obj` is a nest of exact lists and tuples of plain, dense
    tensors and Python scalars of exact built-in types (what `transfer.unpack` makes): nothing
    in it can run the program's code when the harness reads, hashes or copies it."""
    kind = type(obj)
    if kind is list or kind is tuple:
        for item in obj:
            check_plain(item, what)
        return
    if kind in _SCALAR_TYPES:
        return
    problem = not_plain(obj)
    if problem:
        raise HarnessObjectError(f"{what} holds {problem}, where the harness put a plain tensor")


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
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for item in obj:
            _digest_into(h, item)
    else:
        h.update(f"V{type(obj).__name__}:{obj!r}".encode())


class Fingerprinter:
    """Cheap summaries of an output that the host compares against the reference's.

    Per tensor: "sums" = [sum, sum |x|, sum x^2, sum w*x with a secret +-1 pattern w, and the
    counts of NaN, +inf, -inf], plus "blocks" and "block_abs": sum and sum |x| over up to
    MAX_BLOCKS contiguous blocks. A wrong output cannot match them within tolerance without
    computing the right values; block sums also catch permuted or partly computed outputs.
    Non-finite values count in the counts and as 0 in the sums.
    """

    MAX_BLOCKS = 1024

    def __init__(self, secret_seed: int):
        self.secret_seed = secret_seed
        self._weights: dict[tuple[int, str], torch.Tensor] = {}

    def __call__(self, t: torch.Tensor) -> dict:
        x = t.detach().reshape(-1)
        if x.is_complex():
            x = torch.view_as_real(x).reshape(-1)
        x = x.to(torch.float64)
        w = self._weights_for(x.numel(), x.device)
        sums, blocks, block_abs = _summaries(x, w, self.MAX_BLOCKS)
        specials = [0.0, 0.0, 0.0]
        if not all(map(math.isfinite, sums)):  # NaN/inf somewhere (a full isfinite pass is costly)
            specials = [float(torch.isnan(x).sum()), float(torch.isposinf(x).sum()),
                        float(torch.isneginf(x).sum())]
            x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
            sums, blocks, block_abs = _summaries(x, w, self.MAX_BLOCKS)
        return {"sums": sums + specials, "blocks": blocks, "block_abs": block_abs}

    def _weights_for(self, numel: int, device: torch.device) -> torch.Tensor:
        key = (numel, str(device))
        # The cache lives across calls where the program can reach it: checked before it is used.
        if type(self._weights) is not dict or type(self.secret_seed) is not int:
            raise HarnessObjectError("the fingerprints' weight cache was replaced")
        if key not in self._weights:
            generator = torch.Generator(device="cpu").manual_seed(self.secret_seed)
            signs = torch.randint(0, 2, (numel,), generator=generator, dtype=torch.int8) * 2 - 1
            self._weights[key] = signs.to(device=device, dtype=torch.float64)
        weights = self._weights[key]
        problem = not_plain(weights)
        if problem or weights.dtype != torch.float64 or weights.shape != (numel,):
            raise HarnessObjectError(f"the fingerprints' weight cache holds {problem or 'a changed tensor'}")
        return weights


def block_layout(numel: int, max_blocks: int) -> tuple[int, int]:
    """(number of blocks, elements per block) for an output of numel elements."""
    if numel == 0:
        return 0, 0
    count = min(max_blocks, numel)
    size = -(-numel // count)
    return -(-numel // size), size


def _summaries(x: torch.Tensor, w: torch.Tensor, max_blocks: int) -> tuple[list[float], list[float], list[float]]:
    """([sum, sum |x|, sum x^2, sum w*x], block sums, block sums of |x|) of a flat float64
    tensor. The totals are summed from the blocks, and everything leaves the device in one
    transfer: a fingerprint costs a few passes over the output, not one per number."""
    count, size = block_layout(x.numel(), max_blocks)
    if count == 0:
        return [0.0, 0.0, 0.0, 0.0], [], []
    padded = x if count * size == x.numel() else torch.nn.functional.pad(x, (0, count * size - x.numel()))
    grid = padded.view(count, size)
    blocks, block_abs = grid.sum(dim=1), torch.linalg.vector_norm(grid, 1, dim=1)
    totals = torch.stack([blocks.sum(), block_abs.sum(), torch.dot(x, x), torch.dot(x, w)])
    values = torch.cat([totals, blocks, block_abs]).tolist()
    return values[:4], values[4:4 + count], values[4 + count:]


def copy_outputs(outputs: list[torch.Tensor]) -> tuple[list[torch.Tensor], tuple]:
    """Fresh copies of the (checked, plain) outputs, and their snapshot (see `serialize_snapshot`). Always
    freshly allocated: a buffer kept from an earlier call is within the program's reach (gc,
    frames) and could have been replaced by an object whose `copy_` runs its code, so none is
    reused. On the CPU the copy is the snapshot's bytes themselves (one copy, not two); on a
    device it is a device copy, and the snapshot a transfer of it."""
    kept, taken = [], []
    for t in outputs:
        if t.device.type != "cpu":
            copy = t.detach().clone(memory_format=torch.contiguous_format)
            kept.append(copy)
            taken.append(_take(copy))
            continue
        entry = _take(t)
        taken.append(entry)
        kept.append(_rebuild(entry))
    return kept, tuple(taken)


def _take(t: torch.Tensor) -> tuple:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return str(t.dtype), tuple(t.shape), raw


def _rebuild(entry: tuple) -> torch.Tensor:
    """A plain CPU tensor over a snapshot entry's bytes (read only by the harness)."""
    dtype_name, shape, raw = entry
    dtype = _ALL_DTYPES[dtype_name]
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)


def serialize(tensors: list[torch.Tensor]) -> bytes:
    """Plain CPU copies saved with torch.save; the host loads them with weights_only=True."""
    buffer = io.BytesIO()
    _save([t.detach().to("cpu").contiguous().clone() for t in tensors], buffer)
    return buffer.getvalue()


def serialize_snapshot(taken) -> bytes:
    """A snapshot's tensors saved as `serialize` saves them, rebuilt by the harness from the
    bytes after checking that the snapshot is one `copy_outputs` made (exact types only).

    A snapshot is the kept copies' values as immutable bytes, taken inside the call's bracket
    with the copy that is fingerprinted: ((dtype name, shape, bytes), ...). `fetch` serializes
    exactly these, so what the host compares in full is what was fingerprinted."""
    if type(taken) is not tuple:
        raise HarnessObjectError("a kept copy was replaced")
    tensors = []
    for entry in taken:
        if type(entry) is not tuple or len(entry) != 3:
            raise HarnessObjectError("a kept copy was replaced")
        dtype_name, shape, raw = entry
        if type(dtype_name) is not str or dtype_name not in _ALL_DTYPES or type(raw) is not bytes or \
                type(shape) is not tuple or any(type(n) is not int for n in shape):
            raise HarnessObjectError("a kept copy was replaced")
        tensors.append(_rebuild(entry).clone())
    return serialize(tensors)


class Timer:
    """Times one forward call. CPU: host clock. CUDA: events around the call, with an L2 flush
    before it and a device-wide synchronisation (all streams) before the end mark."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        if self.cuda:
            self._sync = torch._C._cuda_synchronize
            self._event_type = torch.cuda.Event
            self._stream = torch.cuda.Stream(device=device)
            self._flush_buffer = torch.empty(_l2_flush_bytes(device), dtype=torch.uint8, device=device)

    def harness_tensors(self) -> list:
        """The timer's own tensors (the L2 flush buffer), for a check before each call."""
        return [self._flush_buffer] if self.cuda else []

    def drain(self) -> None:
        """Wait for this process's queued device work (the last output's copy): none of it
        may still run once the other worker's timed loop starts."""
        if self.cuda:
            self._sync()

    def call(self, fn, args) -> tuple[object, float, float]:
        """Run fn(*args); return (output, event_ms, host_ms). On CPU event_ms == host_ms."""
        if not self.cuda:
            start = _perf_ns()
            output = fn(*args)
            host_ms = (_perf_ns() - start) / 1e6
            return output, host_ms, host_ms
        self._flush_buffer.zero_()
        self._sync()
        start_event = self._event_type(enable_timing=True)
        end_event = self._event_type(enable_timing=True)
        start_event.record(self._stream)
        start = _perf_ns()
        output = fn(*args)
        self._sync()
        end_event.record(self._stream)
        host_ms = (_perf_ns() - start) / 1e6
        end_event.synchronize()
        return output, start_event.elapsed_time(end_event), host_ms


def _l2_flush_bytes(device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
    return max(2 * l2, 64 << 20)

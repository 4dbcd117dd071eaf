"""Inputs, outputs, fingerprints and the timed call, as the worker performs them.

Everything the timing depends on is bound at import of this module, which happens before the
candidate is imported, so the candidate cannot swap the clock or the synchronisation.
"""

from __future__ import annotations

import hashlib
import io
import math
import random
import time

import torch

_perf_ns = time.perf_counter_ns
_tensor_type = torch.Tensor
_save = torch.save
_manual_seed = torch.manual_seed
_random_seed = random.seed
try:
    import numpy

    _numpy_seed = numpy.random.seed
except ImportError:
    _numpy_seed = None


class OutputError(ValueError):
    """The forward returned something that is not a plain tensor or a sequence of them."""


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
        if key not in self._weights:
            generator = torch.Generator(device="cpu").manual_seed(self.secret_seed)
            signs = torch.randint(0, 2, (numel,), generator=generator, dtype=torch.int8) * 2 - 1
            self._weights[key] = signs.to(device=device, dtype=torch.float64)
        return self._weights[key]


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


def copy_outputs(outputs: list[torch.Tensor], buffers: list[torch.Tensor] | None) -> list[torch.Tensor]:
    """Copies of the outputs, written into `buffers` when every one matches in shape, dtype and
    device, else freshly allocated."""
    fits = buffers is not None and len(buffers) == len(outputs) and all(
        b.shape == t.shape and b.dtype == t.dtype and b.device == t.device and b.is_contiguous()
        for b, t in zip(buffers, outputs))
    if not fits:
        return [t.detach().clone(memory_format=torch.contiguous_format) for t in outputs]
    for buffer, t in zip(buffers, outputs):
        buffer.copy_(t.detach())
    return buffers


def serialize(tensors: list[torch.Tensor]) -> bytes:
    """Plain CPU copies saved with torch.save; the host loads them with weights_only=True."""
    buffer = io.BytesIO()
    _save([t.detach().to("cpu").contiguous().clone() for t in tensors], buffer)
    return buffer.getvalue()


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

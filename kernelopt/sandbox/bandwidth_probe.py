"""Measure the device's highest memory bandwidth, once per machine, for the physical floor
(physics.py). Run by the host as a script in a child process of its own (trusted code: never in
a worker), with the workers' thread settings, so that the host's own threads and torch state are
left alone. Prints one JSON object: {"bandwidth_gbs": ..., "detail": ...} (and a GPU's "l2_bytes").

CPU: the highest rate, over working sets from L1-sized to DRAM-sized, of a copy (bytes read and
written) and of a sum (bytes read) with the workers' threads (OMP_NUM_THREADS, set by the
host as for the workers: one by default): inputs the host has just
written may sit in a cache, so the ceiling is the fastest level's, not DRAM's.
GPU (a device the datasheet table does not know): a device-to-device copy of a buffer larger than
any L2, timed with events.

Imports only the standard library and torch. Bounded: about a second on the development VM."""

from __future__ import annotations

import json
import sys
import time

import torch

CPU_SIZES = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
CPU_BUDGET_S = 0.08  # per size and operation
GPU_BYTES = 1 << 30


def _best_rate(operation, moved: int, budget_s: float) -> float:
    """Bytes per second of the fastest repetition of `operation` (each moving `moved` bytes)
    within `budget_s`; repetitions are batched so that one timed batch takes at least 50 us."""
    operation()
    batch, best = 1, 0.0
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end:
        begin = time.perf_counter()
        for _ in range(batch):
            operation()
        took = time.perf_counter() - begin
        if took < 5e-5:
            batch *= 4
            continue
        best = max(best, moved * batch / took)
    return best


def cpu() -> dict:
    rates = {}
    for size in CPU_SIZES:
        count = size // 4
        src, dst = torch.rand(count), torch.empty(count)
        copy = _best_rate(lambda: dst.copy_(src), 2 * size, CPU_BUDGET_S)
        total = _best_rate(lambda: src.sum(), size, CPU_BUDGET_S)
        rates[size] = max(copy, total)
    size, best = max(rates.items(), key=lambda item: item[1])
    return {"bandwidth_gbs": best / 1e9,
            "detail": f"the highest of a {torch.get_num_threads()}-thread copy and sum over working sets of "
                      f"{CPU_SIZES[0] >> 10} KiB-{CPU_SIZES[-1] >> 20} MiB (best at {size >> 10} KiB)"}


def gpu(index: int) -> dict:
    device = torch.device("cuda", index)
    src = torch.empty(GPU_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize(device)
    best = 0.0
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = max(best, 2 * GPU_BYTES / (start.elapsed_time(end) / 1e3))
    props = torch.cuda.get_device_properties(index)
    return {"bandwidth_gbs": best / 1e9, "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
            "detail": f"a device-to-device copy of {GPU_BYTES >> 20} MiB on {props.name}"}


def main(argv: list[str]) -> int:
    device = argv[1] if len(argv) > 1 else "cpu"
    if device.startswith("cuda"):
        found = gpu(int(device.split(":", 1)[1]) if ":" in device else 0)
    else:
        found = cpu()
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

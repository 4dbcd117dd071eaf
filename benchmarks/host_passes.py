"""The host's passes over one large output, timed: the full comparison (compare.compare_tensor),
two trials of the input-dependence sums (compare.InputDependence) and one copy of the
every-element response sums (every_element._PartSums), at several step sizes (compare._STEP).

These run on the host for every trial and every-element copy, on a GPU too (the outputs come
to the host there). Usage, side by side with a core kept busy or not:

    .venv/bin/python benchmarks/host_passes.py [--numel 16777216] [--steps 16384 65536] [--repeat 3] [--busy]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

import torch

from kernelopt.sandbox import compare
from kernelopt.sandbox.every_element import _PartSums, part_size
from kernelopt.sandbox.results import EvalOptions


def _spin() -> None:
    while True:
        pass


def timed_passes(numel: int) -> dict[str, float]:
    """Milliseconds of each pass over `numel` float32 elements at the current step size."""
    generator = torch.Generator().manual_seed(0)
    ref, previous = torch.randn(numel, generator=generator), torch.randn(numel, generator=generator)
    out = ref + 1e-6 * torch.randn(numel, generator=generator)
    out_previous = previous + 1e-6 * torch.randn(numel, generator=generator)
    options, times = EvalOptions(), {}
    started = time.perf_counter()
    compare.compare_tensor(out, ref, options)
    times["comparison"], started = (time.perf_counter() - started) * 1e3, time.perf_counter()
    dependence = compare.InputDependence(options)
    dependence.add([out_previous], [previous])
    dependence.add([out], [ref])
    times["dependence x2"], started = (time.perf_counter() - started) * 1e3, time.perf_counter()
    sums = _PartSums(ref, part_size(ref.numel()))
    sums.add(out_previous, out, previous, ref)
    times["response"] = (time.perf_counter() - started) * 1e3
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--numel", type=int, default=4096 * 4096)
    parser.add_argument("--steps", type=int, nargs="+", default=[1 << 14, 1 << 15, 1 << 16])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="keep one core busy with a spinning process")
    args = parser.parse_args()
    spinner = multiprocessing.Process(target=_spin, daemon=True) if args.busy else None
    if spinner is not None:
        spinner.start()
    try:
        print(f"{args.numel} float32 elements, {torch.get_num_threads()} threads, busy core: {args.busy}; "
              f"median of {args.repeat} (ms)")
        for step in args.steps:
            compare._STEP = step
            runs = [timed_passes(args.numel) for _ in range(args.repeat)]
            medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
            print(f"step {step:>8}: " + ", ".join(f"{name} {ms:.0f}" for name, ms in medians.items()))
    finally:
        if spinner is not None:
            spinner.terminate()


if __name__ == "__main__":
    main()

"""Host-side full comparison of a large output: the working-precision fast path against doing
every step in float64 (the earlier method, still the path for steps with NaN, infinities or huge
values). Both run here, side by side, on the same tensors; reported as a ratio.

KernelBench's level-1 outputs reach 1.6 G elements (e.g. 4096 x 393216 for the activations),
and every correctness trial compares the whole output, so this cost is per trial. Usage:

    .venv/bin/python benchmarks/compare_speed.py [--elements 16M] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from kernelopt.sandbox import compare
from kernelopt.sandbox.results import EvalOptions


def float64_everywhere(out: torch.Tensor, ref: torch.Tensor, options: EvalOptions) -> compare._ErrorSums:
    o_all, r_all = compare._flat(out), compare._flat(ref)
    sums = compare._ErrorSums(count=r_all.numel())
    for start in range(0, sums.count, compare._STEP):
        compare._add_exact_step(sums, o_all[start:start + compare._STEP].to(torch.float64),
                                r_all[start:start + compare._STEP].to(torch.float64), options)
    return sums


def best_of(repeats: int, function, *args) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeats):
        begin = time.perf_counter()
        value = function(*args)
        times.append(time.perf_counter() - begin)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", default="16M", help="output size, e.g. 16M (default)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    count = int(float(args.elements.rstrip("M")) * (1 << 20)) if args.elements.endswith("M") else int(args.elements)
    options = EvalOptions(device="cpu")
    generator = torch.Generator().manual_seed(0)
    ref = torch.randn(count, generator=generator)
    out = ref + 1e-4 * torch.randn(count, generator=generator)
    old_s, old = best_of(args.repeats, float64_everywhere, out, ref, options)
    new_s, new = best_of(args.repeats, compare._error_sums, out, ref, options)
    assert (old.outside, old.nan_mismatches) == (new.outside, new.nan_mismatches)
    assert abs(old.diff_squares - new.diff_squares) <= 1e-6 * old.diff_squares
    per_million = 1e6 / count
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{len(os.sched_getaffinity(0))} cores, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{count} float32 elements, best of {args.repeats}")
    print(f"float64 every step: {old_s:.3f} s ({old_s * per_million * 1000:.1f} ms per 1M elements)")
    print(f"fast path:          {new_s:.3f} s ({new_s * per_million * 1000:.1f} ms per 1M elements)")
    print(f"ratio: {old_s / new_s:.2f}x; a 1.6 G-element output: {old_s * 1.6e9 / count:.0f} s -> "
          f"{new_s * 1.6e9 / count:.0f} s per trial")


if __name__ == "__main__":
    main()

"""Timing statistics (host side): summaries, and how precisely they know a median and a speedup."""

from __future__ import annotations

import math
import statistics

from kernelopt.sandbox.results import TimingStats


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values, q in [0, 1]."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarize(samples_ms: list[float]) -> TimingStats:
    values = sorted(samples_ms)
    median = statistics.median(values)
    p25, p75 = percentile(values, 0.25), percentile(values, 0.75)
    return TimingStats(
        samples=len(values), median_ms=median, mean_ms=statistics.fmean(values),
        std_ms=statistics.pstdev(values) if len(values) > 1 else 0.0,
        min_ms=values[0], max_ms=values[-1], p25_ms=p25, p75_ms=p75,
        rel_iqr=(p75 - p25) / median if median > 0 else 0.0,
        median_precision=median_precision(values),
    )


def median_precision(samples_ms: list[float]) -> float:
    """Half the width of a 95 % confidence interval of the median, relative to the median.

    Distribution-free: the interval runs between the order statistics at ranks
    n/2 -+ 0.98 sqrt(n) (the normal approximation of the binomial count of samples below the
    true median), so a skewed or heavy-tailed distribution of call times needs no model.
    """
    values = sorted(samples_ms)
    n = len(values)
    median = statistics.median(values)
    if median <= 0:
        return 0.0
    reach = 0.98 * math.sqrt(n)
    low = max(0, math.floor(n / 2 - reach) - 1)
    high = min(n - 1, math.ceil(n / 2 + reach))
    return (values[high] - values[low]) / (2 * median)


def speedup_precision(cand: TimingStats, ref: TimingStats) -> float:
    """Relative half-width of the speedup's 95 % interval: the speedup is a ratio of the two
    medians, so their relative uncertainties add in quadrature."""
    return math.hypot(cand.median_precision or 0.0, ref.median_precision or 0.0)


# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(degrees: int) -> float:
    if degrees < 1:
        return math.inf
    return _T95[degrees - 1] if degrees <= len(_T95) else 1.96 + 2.4 / degrees


# What one evaluation holds fixed and the next one changes: the two worker processes (their
# heaps, page placement, which core's cache a buffer warmed in). Rounds cannot see it, so the
# interval adds it: the relative standard deviation of an exact copy's speedup across fresh
# evaluations beyond its within-evaluation spread (benchmarks/timing_stability.py). CPU:
# measured on the 2-core VM with jemalloc: an exact copy of the memory-bound 40_LayerNorm
# (268 MB input) scattered by 4.3 % (sd) over 12 evaluations, of which about 2.5 % is the
# rounds' own noise; 19_ReLU (1 MiB) by less. CUDA: provisional until measured on a GPU.
BETWEEN_PROCESS_SPREAD = {"cpu": 0.035, "cuda": 0.01}
# On a CPU the process effect grows with what a call moves once that is far beyond the caches:
# where each process's pages lie then decides a DRAM-bound call's speed. KernelBench v0.1's
# 81_conv_transposed_2D (0.85 GB a call) read 0.877x-0.903x in seven evaluations of an exact copy:
# its calls cost the candidate's process 12-15 % more CPU time, with no page faults, no preemption,
# huge pages or not, inputs in the shared slot or copied out of it; with both heaps pre-faulted
# at import the same copy read 1.090x. So a CPU call's spread grows in proportion to its bytes
# beyond FOOTPRINT_BYTES, up to CPU_SPREAD_CAP (81's +-10 %, reached from about 767 MB): the
# interval then holds what one pair of processes cannot show. 40_LayerNorm (536 MB a call, 4.3 %
# sd measured) gets 7.0 %.
FOOTPRINT_BYTES = 256 << 20
CPU_SPREAD_CAP = 0.10
# Short calls: the thin loop inside every window (unpacking, the answer, the thaw and freeze)
# costs each fresh worker process a slightly different absolute time, which the rounds of one
# pair of processes cannot see; against a short call it is a large share. Measured on the 2-core
# VM (2026-11-28, benchmarks/honest_under_load.py): the honest drop_dead_work.py on
# 4_RedundantSoftmax (a 0.55 ms candidate call against a 4.7 ms reference) read 7.16x-9.77x over
# ten evaluations, a 11.4 % sd of which about 5 % is the rounds' own: about 0.056 ms (sd) of
# the short side's call differs between process pairs. CUDA: provisional until measured.
HARNESS_SPREAD_MS = {"cpu": 0.06, "cuda": 0.02}


def between_process_spread(device: str, bytes_per_call: int = 0, call_ms: float | None = None) -> float:
    """The relative standard deviation two fresh worker processes add to a speedup, for calls
    that move `bytes_per_call` (inputs and outputs) and whose shorter side takes `call_ms`."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if kind == "cuda":
        spread = BETWEEN_PROCESS_SPREAD["cuda"]
    else:
        growth = max(1.0, bytes_per_call / FOOTPRINT_BYTES)
        spread = min(CPU_SPREAD_CAP, BETWEEN_PROCESS_SPREAD["cpu"] * growth)
    if call_ms is not None and call_ms > 0:
        spread = math.hypot(spread, HARNESS_SPREAD_MS[kind] / call_ms)
    return spread


def calibrated_precision(within: float, device: str, bytes_per_call: int = 0, call_ms: float | None = None) -> float:
    """The speedup's 95 % relative half-width: the rounds' (ratio_precision) and the
    between-process part (between_process_spread, for calls that move `bytes_per_call` and whose
    shorter side takes `call_ms`), in quadrature."""
    return math.hypot(within, 1.96 * between_process_spread(device, bytes_per_call, call_ms))


def ratio_precision(numerators: list[float], denominators: list[float]) -> float:
    """Relative half-width of a 95 % confidence interval of sum(numerators) / sum(denominators)
    from paired samples (each round's mean call time of the reference and of the candidate).

    The ratio's linearised residuals d_i = a_i - R b_i carry its uncertainty (the delta
    method for a ratio estimator). The samples are whole rounds, so the interval covers what
    changes between rounds (which worker goes first, where buffers lie, fresh allocations,
    the core), not just the noise between calls of one round."""
    k = len(numerators)
    total_b = sum(denominators)
    if k < 2 or total_b <= 0 or sum(numerators) <= 0:
        return 1.0
    ratio = sum(numerators) / total_b
    residuals = [a - ratio * b for a, b in zip(numerators, denominators)]
    standard_error = statistics.stdev(residuals) / (math.sqrt(k) * (total_b / k))
    return t95(k - 1) * standard_error / ratio

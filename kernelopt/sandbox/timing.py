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
    return math.hypot(cand.median_precision, ref.median_precision)

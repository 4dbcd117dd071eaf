"""Timing statistics and the noise-based stopping rule (host side)."""

from __future__ import annotations

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
    )


def spread_settled(samples_ms: list[float], minimum: int, target_rel_spread: float) -> bool:
    """Enough samples, and the interquartile range small relative to the median."""
    return len(samples_ms) >= minimum and summarize(samples_ms).rel_iqr <= target_rel_spread

"""Timing on the host: the statistics of a speedup (stats.py), the overhead allowance and
charge (allowance.py), the stop rule (stop.py) and the interleaved rounds that measure
(rounds.py, imported by the session: it talks to the workers)."""

from kernelopt.sandbox.timing.allowance import (
    PROCESS_OVERHEAD_TOLERANCE, REFERENCE_ROUND_CAP, Difference, Gaps, Overheads, capped_reference_means, charge,
    difference, excess, gap_floor, gaps, overheads, robust_spread, side_means,
)
from kernelopt.sandbox.timing.stats import (
    BETWEEN_PROCESS_SPREAD, between_process_spread, calibrated_precision, median_precision, percentile, ratio_precision,
    speedup_precision, summarize, t95,
)
from kernelopt.sandbox.timing.stop import MIN_ROUNDS, StopRule

__all__ = [
    "BETWEEN_PROCESS_SPREAD", "Difference", "Gaps", "MIN_ROUNDS", "Overheads", "PROCESS_OVERHEAD_TOLERANCE", "REFERENCE_ROUND_CAP", "StopRule",
    "between_process_spread", "calibrated_precision", "capped_reference_means", "charge", "difference", "excess", "gap_floor", "gaps", "median_precision", "overheads", "percentile", "ratio_precision", "robust_spread", "side_means",
    "speedup_precision", "summarize", "t95",
]

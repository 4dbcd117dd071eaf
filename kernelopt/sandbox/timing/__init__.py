"""Timing on the host: the statistics of a speedup (stats.py), each side's means per round
(means.py), the stop rule (stop.py) and the interleaved rounds that measure (rounds.py, imported
by the session: it talks to the workers)."""

from kernelopt.sandbox.timing.means import REFERENCE_ROUND_CAP, capped_reference_means, side_means
from kernelopt.sandbox.timing.stats import (
    BETWEEN_PROCESS_SPREAD, between_process_spread, calibrated_precision, median_precision, percentile, ratio_precision,
    speedup_precision, summarize, t95,
)
from kernelopt.sandbox.timing.stop import MIN_ROUNDS, StopRule

__all__ = [
    "BETWEEN_PROCESS_SPREAD", "MIN_ROUNDS", "REFERENCE_ROUND_CAP", "StopRule", "between_process_spread",
    "calibrated_precision", "capped_reference_means", "median_precision", "percentile", "ratio_precision",
    "side_means", "speedup_precision", "summarize", "t95",
]

"""Counters and sums behind GET /metrics, in the Prometheus text format."""

from __future__ import annotations

import threading
from collections import Counter


class Metrics:
    """Request and verdict counts, and evaluation time; gauges are read from the service when
    rendered, so they are never stale."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (path, code) -> count
        self.verdicts: Counter = Counter()  # status -> count
        self.evaluation_seconds_sum = 0.0
        self.evaluation_count = 0
        self.abandoned_jobs = 0  # withdrawn because their client went away

    def request(self, path: str, code: int) -> None:
        with self._lock:
            self.requests[(path, code)] += 1

    def verdict(self, status: str, seconds: float | None = None) -> None:
        with self._lock:
            self.verdicts[status] += 1
            if seconds is not None:
                self.evaluation_seconds_sum += seconds
                self.evaluation_count += 1

    def abandoned(self, jobs: int) -> None:
        with self._lock:
            self.abandoned_jobs += jobs

    def mean_evaluation_seconds(self) -> float | None:
        with self._lock:
            return self.evaluation_seconds_sum / self.evaluation_count if self.evaluation_count else None

    def render(self, gauges: dict[str, tuple[str, float]]) -> str:
        """The text format; `gauges` maps a name to its help text and value."""
        with self._lock:
            lines = self._counter_lines()
        for name, (help_text, value) in gauges.items():
            lines += [f"# HELP kernelopt_{name} {help_text}", f"# TYPE kernelopt_{name} gauge",
                      f"kernelopt_{name} {value:g}"]
        return "\n".join(lines) + "\n"

    def _counter_lines(self) -> list[str]:
        lines = ["# HELP kernelopt_requests_total HTTP requests answered, by path and status code.",
                 "# TYPE kernelopt_requests_total counter"]
        lines += [f'kernelopt_requests_total{{path="{path}",code="{code}"}} {count}'
                  for (path, code), count in sorted(self.requests.items())]
        lines += ["# HELP kernelopt_verdicts_total Verdicts reached, by status (format_error included).",
                  "# TYPE kernelopt_verdicts_total counter"]
        lines += [f'kernelopt_verdicts_total{{status="{status}"}} {count}'
                  for status, count in sorted(self.verdicts.items())]
        lines += ["# HELP kernelopt_evaluation_seconds Seconds of evaluation per candidate, to its verdict.",
                  "# TYPE kernelopt_evaluation_seconds summary",
                  f"kernelopt_evaluation_seconds_sum {self.evaluation_seconds_sum:.6f}",
                  f"kernelopt_evaluation_seconds_count {self.evaluation_count}",
                  "# HELP kernelopt_abandoned_jobs_total Candidates of requests whose client went away first "
                  "(not judged unless already running).",
                  "# TYPE kernelopt_abandoned_jobs_total counter",
                  f"kernelopt_abandoned_jobs_total {self.abandoned_jobs}"]
        return lines

"""What every pass over a problem set shares (rescoring, the agent over a set, generate).

- `ResultLog`: OUT/*.jsonl, one record a line, appended and flushed as each is reached, so a
  killed pass loses at most the work in flight and a rerun with the same OUT skips what is there.
- `Progress`: one line per finished item with an ETA.
- `run_on_devices`: problems handed out from one queue, one at a time per device (`--gpus`).
- `check_health_once`: the reference's health (kernelopt/sandbox/problem_health.py), probed once per
  problem and kept in the log; flags are reported, never charged to a candidate.
- `write_summary`: the summary, with the mode and the set's problems, into OUT/summary.json.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from pathlib import Path

from kernelopt.kernelbench import ProblemSet
from kernelopt.sandbox import Judge

_Item = TypeVar("_Item")  # what run_on_devices hands out


class ResultLog:
    """OUT/results.jsonl: one verdict a line, appended and flushed as each is reached. A later
    record with the same key replaces an earlier one. Thread-safe (one writer at a time)."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, dict] = {}
        self._lock = threading.Lock()
        if path.exists():
            text = path.read_text(encoding="utf-8")
            if text and not text.endswith("\n"):
                # A line torn by a kill: cut it off, so that the next record starts a line of
                # its own; that solution is judged again.
                text = text[:text.rfind("\n") + 1]
                path.write_text(text, encoding="utf-8")
            for line in text.splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a damaged line: that solution is judged again
                self.records[record["key"]] = record

    def add(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self.records[record["key"]] = record
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)


@dataclass
class Progress:
    """One line per finished item (a solution judged, a problem optimized) with an ETA from the
    items finished in this run, `parallel` of them at a time; a `report` that also has
    `update(done, total, eta)` (kernelopt.cli.console.ConsoleProgress) gets the counts for a
    bar. Thread-safe."""

    total: int
    report: Callable[[str], None]
    parallel: int = 1
    done: int = 0
    judged_seconds: float = 0.0
    judged: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def step(self, what: str, record: dict, seconds: float | None, note: str = "") -> None:
        """`what` finished with `record` after `seconds` (None: taken from an earlier run)."""
        with self._lock:
            self.done += 1
            if seconds is not None:
                self.judged += 1
                self.judged_seconds += seconds
            per_item = self.judged_seconds / self.judged if self.judged else 0.0
            remaining = (self.total - self.done) * per_item / max(1, self.parallel)
            speedup = f" {record['speedup']:.2f}x" if record.get("speedup") else ""
            reused = " (from an earlier run)" if seconds is None else ""
            eta = _duration(remaining)
            self.report(f"[{self.done}/{self.total}] {what}: {record['status']}{speedup}{note}{reused}  ETA {eta}")
            update = getattr(self.report, "update", None)  # a progress bar, where the CLI gave one
            if update is not None:
                update(self.done, self.total, eta)


def run_on_devices(items: list[_Item], devices: list[str], work: Callable[[_Item, str], None]) -> None:
    """work(item, device) for every item, one item at a time per device, handed out in order
    from one queue. One device: in this thread (so Ctrl-C reaches the work as usual). Several:
    a thread per device, each confined to its own share of the CPU cores (the referee pins
    timed calls to the last core it may use, so concurrent timings must not share one). The
    first exception stops the handing out and is raised when the items in progress are done."""
    if len(devices) == 1:
        for item in items:
            work(item, devices[0])
        return
    queue, lock = deque(items), threading.Lock()
    errors: list[BaseException] = []

    def serve(device: str, cores: set[int]) -> None:
        os.sched_setaffinity(0, cores)  # this thread only; the threads and workers it starts inherit it
        while True:
            with lock:
                if errors or not queue:
                    return
                item = queue.popleft()
            try:
                work(item, device)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
                with lock:
                    errors.append(exc)
                return

    threads = [threading.Thread(target=serve, args=(device, cores), name=f"bench-{device}", daemon=True)
               for device, cores in zip(devices, core_shares(len(devices)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def core_shares(count: int) -> list[set[int]]:
    """This process's CPU cores in `count` contiguous shares (all of them each, if too few)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < count:
        return [set(cores)] * count
    size, extra = divmod(len(cores), count)
    shares, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        shares.append(set(cores[start:end]))
        start = end
    return shares


def write_summary(out: Path, summary: dict, mode: str, problem_set: ProblemSet) -> dict:
    """The summary plus the mode and the set's problems in order, also kept in OUT/summary.json
    (written whole, then renamed into place)."""
    summary.update(mode=mode, problems=[{"level": p.level, "problem_id": p.problem_id, "name": p.name}
                                        for p in problem_set])
    path = out / "summary.json"
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
    return summary


def check_health_once(judge: Judge, problem, log: ResultLog, report) -> dict:
    """Flag a reference no candidate can be judged fairly against (kept in the log, so a resumed
    run does not probe again); returns the health record. `judge`: the problem's (its health
    probed on this machine or on a cluster's actor)."""
    key = f"health/{problem.level}/{problem.problem_id}"
    if key in log.records:
        return log.records[key]
    return record_health(problem, judge.health(), log, report)


def record_health(problem, health: dict, log: ResultLog, report) -> dict:
    """A health probe's outcome (Health.as_dict, probed here or on a cluster's actor) in the log."""
    record = {"key": f"health/{problem.level}/{problem.problem_id}", "kind": "health", "level": problem.level,
              "problem_id": problem.problem_id, **health}
    log.add(record)
    if not health["healthy"]:
        report(f"level {problem.level} problem {problem.problem_id}: reference flagged: " + "; ".join(health["details"]))
    return record




def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"

"""Rescoring existing generations over a problem set with our referee (`kernelopt bench
--solutions DIR`), resumable, and KernelBench's metrics per level.

Solutions are found by KernelBench's file names, `level_{L}_problem_{id}_sample_{s}_kernel.py`,
anywhere under DIR. Each verdict is appended to OUT/results.jsonl as soon as it is reached (one
JSON object a line, flushed), so a killed run loses at most the evaluation in flight; a rerun
with the same OUT skips every (level, problem, sample, code hash) already judged. A problem's
outcome is its best correct sample; problems of the set without any solution count as failures.
Before its samples, each problem's reference is checked for health (kernelopt/sandbox/health.py):
flags are reported per problem in the summary's `health`, never charged to a candidate.
With several devices (`--gpus`), problems are handed out from one queue, one at a time per
device (`run_on_devices`). The summary, with the mode and the set's problems, also goes to
OUT/summary.json. Running the agent over a set (the other mode) is kernelopt/bench/agent_runs.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt.kernelbench import ProblemError, ProblemSet
from kernelopt.kernelbench.metrics import (
    ProblemOutcome, best_per_problem, kind_breakdown, outcome_of, speedup_distribution, summarize,
)
from kernelopt.sandbox import EvalOptions, Evaluator
from kernelopt.sandbox.health import check_health

SOLUTION_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


@dataclass(frozen=True)
class Solution:
    level: int
    problem_id: int
    sample: int
    path: Path
    code: str

    @property
    def key(self) -> str:
        digest = hashlib.sha256(self.code.encode("utf-8")).hexdigest()[:16]
        return f"{self.level}/{self.problem_id}/{self.sample}/{digest}"

    @property
    def label(self) -> str:
        return f"level {self.level} problem {self.problem_id} sample {self.sample}"


def find_solutions(folder: Path) -> list[Solution]:
    """Every KernelBench-named solution file under `folder`, by level, problem and sample."""
    found = []
    for path in folder.rglob("*.py"):
        match = SOLUTION_NAME.match(path.name)
        if match:
            level, problem_id, sample = map(int, match.groups())
            found.append(Solution(level, problem_id, sample, path, path.read_text(encoding="utf-8", errors="replace")))
    return sorted(found, key=lambda s: (s.level, s.problem_id, s.sample, str(s.path)))


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
    items finished in this run, `parallel` of them at a time. Thread-safe."""

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
            self.report(f"[{self.done}/{self.total}] {what}: {record['status']}{speedup}{note}{reused}  "
                        f"ETA {_duration(remaining)}")


def run_on_devices(items: list, devices: list[str], work: Callable[[object, str], None]) -> None:
    """work(item, device) for every item, one item at a time per device, handed out in order
    from one queue. One device: in this thread (so Ctrl-C reaches the work as usual). Several:
    a thread per device, each confined to its own share of the CPU cores (the referee pins
    timed calls to the last core it may use, so concurrent timings must not share one). The
    first exception stops the handing out and is raised when the items in progress are done."""
    if len(devices) == 1:
        for item in items:
            work(item, devices[0])
        return
    queue, errors, lock = deque(items), [], threading.Lock()

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


def rescore(problem_set: ProblemSet, solutions: list[Solution], options: EvalOptions, out: Path, jobs: int,
            report: Callable[[str], None], baselines: list[str] | None = None, store=None,
            devices: list[str] | None = None) -> dict:
    """Judge every solution of the set's problems (skipping those already in OUT/results.jsonl),
    then summarize per level. Solutions for problems outside the set are counted, not judged.
    `devices`: judge problems concurrently, one per device (default: options.device alone)."""
    out.mkdir(parents=True, exist_ok=True)
    log = ResultLog(out / "results.jsonl")
    by_problem = {(p.level, p.problem_id): p for p in problem_set}
    wanted = [s for s in solutions if (s.level, s.problem_id) in by_problem]
    devices = devices or [options.device]
    progress = Progress(len(wanted), report, parallel=len(devices))
    work = []
    for key, problem in by_problem.items():
        mine = [s for s in wanted if (s.level, s.problem_id) == key]
        for solution in [s for s in mine if s.key in log.records]:
            progress.step(solution.label, log.records[solution.key], None)
        pending = [s for s in mine if s.key not in log.records]
        if pending:
            work.append((problem, pending))
    run_on_devices(work, devices, lambda item, device: _judge_problem(
        item[0], item[1], options.model_copy(update={"device": device}), jobs, log, progress))
    best, health = _best_outcomes(log.records.values())
    summary = _summary(problem_set, best, health)
    if baselines:
        summary["vs_baselines"] = against_baselines(problem_set, best, baselines, options, store, report)
    summary.update(n_solutions=len(wanted), n_outside_set=len(solutions) - len(wanted),
                   results=str(log.path))
    return write_summary(out, summary, "solutions", problem_set)


def _judge_problem(problem, pending: list[Solution], options: EvalOptions, jobs: int, log: ResultLog,
                   progress: Progress) -> None:
    started = time.monotonic()
    try:
        with Evaluator(problem, options, jobs=jobs, keep_spare=False) as evaluator:
            check_health_once(evaluator, problem, options, log, progress.report)
            started = time.monotonic()
            for index, result in evaluator.evaluate_many([s.code for s in pending]):
                record = _record(pending[index], status=result.status, speedup=result.speedup,
                                 message=result.message, kinds=result.optimization_kinds, flags=result.flags,
                                 timing=_timing_summary(result))
                log.add(record)
                progress.step(pending[index].label, record, time.monotonic() - started)
                started = time.monotonic()
    except ProblemError as exc:  # the reference is broken: no sample of it can be judged
        for solution in pending:
            if solution.key not in log.records:
                record = _record(solution, status="problem_error", message=str(exc))
                log.add(record)
                progress.step(solution.label, record, 0.0)


def check_health_once(evaluator, problem, options: EvalOptions, log: ResultLog, report) -> dict:
    """Flag a reference no candidate can be judged fairly against (kept in the log, so a resumed
    run does not probe again); returns the health record."""
    key = f"health/{problem.level}/{problem.problem_id}"
    if key in log.records:
        return log.records[key]
    health = check_health(evaluator, options)
    record = {"key": key, "kind": "health", "level": problem.level, "problem_id": problem.problem_id,
              **health.as_dict()}
    log.add(record)
    if not health.healthy:
        report(f"level {problem.level} problem {problem.problem_id}: reference flagged: " + "; ".join(health.details))
    return record


def _record(solution: Solution, status: str, speedup: float | None = None, message: str = "",
            kinds: list | None = None, flags: list | None = None, timing: dict | None = None) -> dict:
    return {"key": solution.key, "level": solution.level, "problem_id": solution.problem_id,
            "sample": solution.sample, "file": str(solution.path), "status": status,
            "correct": status == "correct", "speedup": speedup, "message": message[:2000],
            "optimization_kinds": kinds or [], "flags": flags or [], "timing": timing}


def _timing_summary(result) -> dict | None:
    """What a verdict's speedup rests on, kept in the record: both sides' times and the
    relative half-width of the speedup's 95 % interval (None when the candidate was not timed)."""
    t = result.timing
    if t is None:
        return None
    return {"reference_ms": t.reference_ms, "candidate_ms": t.candidate_ms,
            "speedup_precision": t.speedup_precision, "wall_speedup": t.wall_speedup,
            "samples": t.candidate.samples, "remeasured": t.remeasured}


def summarize_results(problem_set: ProblemSet, records) -> dict:
    """KernelBench metrics per level over the set's problems, from each problem's best sample,
    with the speedup distribution and the optimization-kind breakdown (same shape: levels and
    overall)."""
    return _summary(problem_set, *_best_outcomes(records))


def _summary(problem_set: ProblemSet, best: dict, health: dict) -> dict:
    summary = _per_level(problem_set, best)
    summary["health"] = health
    summary["speedup_distribution"] = _per_level(problem_set, best, speedup_distribution)
    summary["optimization_kinds"] = _per_level(problem_set, best, kind_breakdown)
    return summary


def against_baselines(problem_set: ProblemSet, best: dict, names: list[str], options: EvalOptions, store,
                      report) -> dict:
    """The same metrics with each correct speedup divided by the baseline's speedup over eager
    (a baseline that is not correct itself counts as eager). Baselines are measured only for
    problems with a correct solution: the others fail against any baseline. `best`: each
    problem's best outcome, as _best_outcomes gives it."""
    from kernelopt.bench.baselines import measure_baselines

    measured = {}
    for problem in problem_set:
        outcome = best.get((problem.level, problem.problem_id))
        if outcome and outcome.correct:
            key = (problem.level, problem.problem_id)
            try:
                measured[key] = measure_baselines(problem, names, options, options.device, store, report)
            except ProblemError as exc:  # cannot happen for a reference that judged a sample; be safe
                report(f"level {problem.level} problem {problem.problem_id}: no baselines: {exc}")
                measured[key] = {name: {"status": "problem_error", "speedup_vs_eager": None} for name in names}
    result = {}
    for name in names:
        relative = {}
        for key, outcome in best.items():
            if outcome.correct and outcome.speedup:
                base = measured[key][name]
                factor = base["speedup_vs_eager"] if base["status"] == "correct" and base["speedup_vs_eager"] else 1.0
                relative[key] = ProblemOutcome(True, outcome.speedup / factor)
            else:
                relative[key] = outcome
        result[name] = _per_level(problem_set, relative)
    return result


def _best_outcomes(records) -> tuple[dict, dict]:
    """Each problem's best outcome (kinds included), and the health flags of flagged problems."""
    records = list(records)
    health = {f"{r['level']}/{r['problem_id']}": r["flags"] for r in records
              if r.get("kind") == "health" and r["flags"]}
    best = {key: outcome_of(record) for key, record in best_per_problem(records).items()}
    return best, health


def _per_level(problem_set: ProblemSet, best: dict, metric=summarize) -> dict:
    levels = {}
    for level in problem_set.levels():
        keys = [(p.level, p.problem_id) for p in problem_set if p.level == level]
        levels[str(level)] = metric(keys, {k: best[k] for k in keys if k in best})
    all_keys = [(p.level, p.problem_id) for p in problem_set]
    return {"levels": levels, "overall": metric(all_keys, {k: best[k] for k in all_keys if k in best})}


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"

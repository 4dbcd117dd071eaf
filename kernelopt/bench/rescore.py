"""Rescoring existing generations over a problem set with our referee (`kernelopt bench
--solutions DIR`), resumable, and KernelBench's metrics per level.

Solutions are found by KernelBench's file names, `level_{L}_problem_{id}_sample_{s}_kernel.py`,
anywhere under DIR. Each verdict is appended to OUT/results.jsonl as soon as it is reached (one
JSON object a line, flushed), so a killed run loses at most the evaluation in flight; a rerun
with the same OUT skips every (level, problem, sample, code hash) already judged. A problem's
outcome is its best correct sample; problems of the set without any solution count as failures.
Before its samples, each problem's reference is checked for health (kernelopt/sandbox/problem_health.py):
flags are reported per problem in the summary's `health`, never charged to a candidate.
With several devices (`--gpus`), problems are handed out from one queue, one at a time per
device (runner.run_on_devices); on a Ray cluster (`pool`, kernelopt/cluster), one at a time per
judging actor, the driver alone writing the log. Every verdict records the device model it was
measured on; a pass that mixes models is summarized per model (summary.device_sections). The
summary, with the mode and the set's problems, also goes to OUT/summary.json. Running the agent
over a set (the other mode) is kernelopt/bench/agent_runs.py.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt.bench.runner import (Progress, ResultLog, check_health_once, record_health, run_on_devices,
                                    write_summary)
from kernelopt.bench.summary import against_baselines, best_outcomes, device_sections, level_summary
from kernelopt.kernelbench import ProblemError, ProblemSet
from kernelopt.sandbox import EvalOptions, Evaluator

SOLUTION_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


@dataclass(frozen=True)
class Solution:
    level: int
    problem_id: int
    sample: int
    path: Path
    code: str
    extra: dict = field(default_factory=dict, compare=False, hash=False)  # kept in its record (a release's score)

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


def rescore(problem_set: ProblemSet, solutions: list[Solution], options: EvalOptions, out: Path, jobs: int,
            report: Callable[[str], None], baselines: list[str] | None = None, store=None,
            devices: list[str] | None = None, annotate: Callable[[list], dict] | None = None,
            pool=None, mix_devices: bool = False) -> dict:
    """Judge every solution of the set's problems (skipping those already in OUT/results.jsonl),
    then summarize per level. Solutions for problems outside the set are counted, not judged.
    `devices`: judge problems concurrently, one per device (default: options.device alone).
    `pool`: judge on a Ray cluster's actors instead (a kernelopt.cluster.JudgePool).
    `annotate(records)`: more sections for the summary (a published release's reported vs measured).
    MixedDevicesError when the verdicts come from several device models and not `mix_devices`."""
    out.mkdir(parents=True, exist_ok=True)
    log = ResultLog(out / "results.jsonl")
    by_problem = {(p.level, p.problem_id): p for p in problem_set}
    wanted = [s for s in solutions if (s.level, s.problem_id) in by_problem]
    devices = devices or [options.device]
    progress = Progress(len(wanted), report, parallel=pool.size if pool else len(devices))
    work = []
    for key, problem in by_problem.items():
        mine = [s for s in wanted if (s.level, s.problem_id) == key]
        for solution in [s for s in mine if s.key in log.records]:
            progress.step(solution.label, log.records[solution.key], None)
        pending = [s for s in mine if s.key not in log.records]
        if pending:
            work.append((problem, pending))
    if pool is not None:
        from kernelopt.cluster import run_on_pool

        run_on_pool(work, pool, lambda item: _judge_remotely(pool, item[0], item[1], options, jobs, log, progress))
    else:
        run_on_devices(work, devices, lambda item, device: _judge_problem(
            item[0], item[1], options.model_copy(update={"device": device}), jobs, log, progress))
    best, health = best_outcomes(log.records.values())
    summary = level_summary(problem_set, best, health)
    summary.update(device_sections(problem_set, log.records.values(), mix_devices))
    if baselines:
        summary["vs_baselines"] = against_baselines(problem_set, best, baselines, options, store, report, pool)
    summary.update(n_solutions=len(wanted), n_outside_set=len(solutions) - len(wanted),
                   results=str(log.path))
    if annotate is not None:
        summary.update(annotate(list(log.records.values())))
    return write_summary(out, summary, "solutions", problem_set)


def _judge_problem(problem, pending: list[Solution], options: EvalOptions, jobs: int, log: ResultLog,
                   progress: Progress) -> None:
    from kernelopt.sandbox.device import device_model

    started, model = time.monotonic(), device_model(options.device)
    try:
        with Evaluator(problem, options, jobs=jobs, keep_spare=False) as evaluator:
            check_health_once(evaluator, problem, log, progress.report)
            started = time.monotonic()
            for index, result in evaluator.evaluate_many([s.code for s in pending]):
                record = _verdict_record(pending[index], result, model)
                log.add(record)
                progress.step(pending[index].label, record, time.monotonic() - started)
                started = time.monotonic()
    except ProblemError as exc:  # the reference is broken: no sample of it can be judged
        _problem_failed(pending, exc, log, progress)


def _judge_remotely(pool, problem, pending: list[Solution], options: EvalOptions, jobs: int, log: ResultLog,
                    progress: Progress) -> None:
    """One problem on an actor of the cluster: the health probe (if the log has none) and every
    pending solution in one call. The verdicts are recorded here, in the driver, when the call
    returns: an actor that dies mid-problem has its call made again on a new actor, and nothing
    of it was recorded."""
    started = time.monotonic()
    health_key = f"health/{problem.level}/{problem.problem_id}"
    try:
        answer = pool.judge(problem, options, [s.code for s in pending], jobs=jobs,
                            health=health_key not in log.records)
    except ProblemError as exc:
        if exc.health is not None:
            record_health(problem, exc.health, log, progress.report)
        _problem_failed(pending, exc, log, progress)
        return
    if answer.get("health") is not None:
        record_health(problem, answer["health"], log, progress.report)
    each = (time.monotonic() - started) / max(1, len(pending))
    for solution, result in zip(pending, answer["results"]):
        record = _verdict_record(solution, result, answer["device_model"])
        log.add(record)
        progress.step(solution.label, record, each)


def _verdict_record(solution: Solution, result, model: str) -> dict:
    record = _record(solution, status=result.status, speedup=result.speedup, message=result.message,
                     kinds=result.optimization_kinds, flags=result.flags, timing=_timing_summary(result),
                     device_model=model)
    if result.profile is not None:  # --profile: where the time goes, for the report
        record["profile"] = result.profile.model_dump()
    if result.shapes:  # each input configuration's verdict, for the report
        record["shapes"] = [shape.model_dump() for shape in result.shapes]
    return record


def _problem_failed(pending: list[Solution], exc: ProblemError, log: ResultLog, progress: Progress) -> None:
    """The reference is broken: no sample of it can be judged."""
    for solution in pending:
        if solution.key not in log.records:
            record = _record(solution, status="problem_error", message=str(exc))
            log.add(record)
            progress.step(solution.label, record, 0.0)


def _record(solution: Solution, status: str, speedup: float | None = None, message: str = "",
            kinds: list | None = None, flags: list | None = None, timing: dict | None = None,
            device_model: str | None = None) -> dict:
    return {"key": solution.key, "level": solution.level, "problem_id": solution.problem_id,
            "sample": solution.sample, "file": str(solution.path), "status": status,
            "correct": status == "correct", "speedup": speedup, "message": message[:2000],
            "optimization_kinds": kinds or [], "flags": flags or [], "timing": timing,
            "device_model": device_model, **solution.extra}


def _timing_summary(result) -> dict | None:
    """What a verdict's speedup rests on, kept in the record: both sides' times, the relative
    half-width of the speedup's 95 % interval and the physical floor with each side's fraction of
    speed of light (None when the candidate was not timed)."""
    t = result.timing
    if t is None:
        return None
    return {"reference_ms": t.reference_ms, "candidate_ms": t.candidate_ms,
            "speedup_precision": t.speedup_precision, "wall_speedup": t.wall_speedup,
            "samples": t.candidate.samples, "remeasured": t.remeasured, "floor_ms": t.floor_ms,
            "floor_source": t.floor_source, "reference_sol": t.reference_sol, "candidate_sol": t.candidate_sol}



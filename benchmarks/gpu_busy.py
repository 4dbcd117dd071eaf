"""The GPU's busy share during a `kernelopt eval` batch of distinct cold-build CUDA candidates,
and where the rest of the wall time goes.

The candidates are gpu_throughput.py's: N distinct load_inline CUDA ReLU kernels for
examples/level1/1_ReLU.py, each a cold build (unless --build-cache names a cache that already
holds them). One `kernelopt eval --candidate DIR --device cuda --jobs J --json` judges them
while a thread samples the GPU through NVML (nvml_sampler.py, package `nvidia-ml-py`): the busy
share is the time-weighted mean of NVML's GPU utilization (the percent of each driver period in
which a kernel executed) from the launch of the command to its last verdict. Where the rest
goes comes from the verdicts themselves (batch_phases.py): each candidate's phase durations and
builds, and the windows in which a judged candidate held the device, placed back from the
moment each verdict was printed.

Writes everything to --out (JSON: the machine, the settings, the samples summarised, the phase
totals, each candidate's raw durations) and prints a markdown summary. Usage (on a GPU machine,
with `pip install nvidia-ml-py`):

    python benchmarks/gpu_busy.py [--count 20] [--jobs 4] [--timing-budget 10] [--warm-pch] \\
        [--build-cache DIR] [--out gpu_busy.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_phases import (PHASE_WORDS, Verdict, build_summary, judged_windows, per_candidate,  # noqa: E402
                          phase_totals, statuses)
from gpu_throughput import KERNELOPT, PROBLEM, REPO, warm_cache, write_candidates  # noqa: E402
from nvml_sampler import NvmlUnavailable, Sampler, Timeline, complement, merge, open_nvml  # noqa: E402

from kernelopt.sandbox.results import EvalResult  # noqa: E402


@dataclass
class Batch:
    command: list[str]
    started: float  # seconds since the epoch, when the command was launched
    verdicts: list[Verdict]
    exited: float

    @property
    def ended(self) -> float:
        """The last verdict's moment (the command's exit when it printed none)."""
        return max((v.at for v in self.verdicts), default=self.exited)

    @property
    def wall(self) -> float:
        return self.ended - self.started


def eval_command(folder: Path, device: str, jobs: int, timing_budget: float, cache: Path,
                 extra: list[str] | tuple[str, ...] = (), problem: Path = PROBLEM) -> list[str]:
    return [*KERNELOPT, "eval", "--reference", str(problem), "--candidate", str(folder), "--json",
            "--device", device, "--jobs", str(jobs), "--timing-budget", f"{timing_budget:g}",
            "--build-cache", str(cache), *extra]


def run_batch(command: list[str]) -> Batch:
    """Run the batch, stamping each verdict when its line arrives (the CLI prints each as soon
    as it is reached). Exits with the CLI's error when it fails."""
    verdicts = []
    with tempfile.TemporaryFile(mode="w+") as errors:
        started = time.time()
        # stderr to a file: a pipe nobody reads while stdout is read could fill and stall it
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True) as process:
            for line in process.stdout:
                if line.startswith("{"):
                    record = json.loads(line)
                    candidate = record.pop("candidate", "")
                    verdicts.append(Verdict(candidate, time.time(), EvalResult.model_validate(record)))
        exited = time.time()
        if process.returncode != 0:
            errors.seek(0)
            sys.exit(f"kernelopt eval failed ({process.returncode}):\n{errors.read()[-4000:]}")
    return Batch(command, started, verdicts, exited)


# --- the report ------------------------------------------------------------------------------

def regions(batch: Batch) -> dict[str, list[tuple[float, float]]]:
    """The batch's wall time in three parts: a candidate judged on the device, before the first
    one (the CLI's start, the workers' torch imports, the first loads and builds), and between
    judged candidates (the next one not loaded yet, the reference re-loaded, workers closed)."""
    start, end = batch.started, batch.ended
    judged = [(max(lo, start), min(hi, end)) for lo, hi in merge(judged_windows(batch.verdicts))]
    judged = [(lo, hi) for lo, hi in judged if hi > lo]
    first = judged[0][0] if judged else end
    rest = complement(judged, start, end)
    return {"judged": judged,
            "before_first": [(lo, min(hi, first)) for lo, hi in rest if lo < first],
            "between": [(max(lo, first), hi) for lo, hi in rest if hi > first]}


def region_summary(batch: Batch, timeline: Timeline) -> dict:
    summary = {}
    for name, windows in regions(batch).items():
        seconds = sum(hi - lo for lo, hi in windows)
        busy = timeline.busy_in(windows)
        summary[name] = {"seconds": round(seconds, 3), "share": round(seconds / batch.wall, 4) if batch.wall else None,
                         "busy_share": None if busy.share is None else round(busy.share, 4),
                         "coverage": round(busy.coverage, 4)}
    return summary


def build_report(batch: Batch, timeline: Timeline, machine: dict, settings: dict) -> dict:
    results = [v.result for v in batch.verdicts]
    wall = batch.wall
    return {
        "machine": machine,
        "settings": settings,
        "command": batch.command,
        "wall_s": round(wall, 3),
        "first_verdict_s": round(min(v.at for v in batch.verdicts) - batch.started, 3) if batch.verdicts else None,
        "candidates": len(results),
        "statuses": statuses(results),
        "gpu": timeline.summary(batch.started, batch.ended),
        "regions": region_summary(batch, timeline),
        "phases": {p.name: p.as_dict() for p in phase_totals(results, wall)},
        "builds": build_summary(results),
        "per_candidate": per_candidate(batch.verdicts, batch.started),
    }


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.1f} %"


def markdown(report: dict) -> str:
    m, s, gpu = report["machine"], report["settings"], report["gpu"]
    lines = [
        f"machine: {m['gpu']['name']}, driver {m['gpu']['driver']} (CUDA {m['gpu']['cuda_driver']}), "
        f"torch {m['torch']} (CUDA {m['torch_cuda']}), {m['cpus']} CPUs, load average {m['load_average']:.2f}, "
        f"Python {m['python']}, kernelopt {m['commit']}",
        f"batch: {report['candidates']} candidates, `kernelopt eval --jobs {s['jobs']} --timing-budget "
        f"{s['timing_budget']:g}`, {s['builds']} builds: {report['wall_s']:.1f} s from launch to the last "
        f"verdict (first verdict at {report['first_verdict_s']} s); "
        + ", ".join(f"{n} {k}" for k, n in report["statuses"].items()),
        f"GPU busy (NVML {gpu['mode']}, {gpu['samples']} samples every {gpu['period_s']} s, "
        f"coverage {_percent(gpu['coverage'])}): **{_percent(gpu['busy_share'])}** of the wall time "
        f"(polled rates: {_percent(gpu['polled_rate_share'])})",
        "",
        "| where the wall time goes | seconds | share of wall | GPU busy in it |",
        "| --- | --- | --- | --- |",
        f"| the whole batch | {report['wall_s']:.1f} | 100 % | {_percent(gpu['busy_share'])} |",
    ]
    words = {"judged": "a candidate judged on the device (correctness, timing, profile)",
             "before_first": "before the first judged candidate (CLI start, workers, first builds)",
             "between": "between judged candidates (next one not loaded yet, reference re-load)"}
    for name, region in report["regions"].items():
        lines.append(f"| {words[name]} | {region['seconds']:.1f} | {_percent(region['share'])} | "
                     f"{_percent(region['busy_share'])} |")
    lines += ["", f"| phase, summed over the candidates | seconds | share of wall | overlaps others "
                  f"(up to {s['jobs']} in flight) |", "| --- | --- | --- | --- |"]
    for name, phase in report["phases"].items():
        lines.append(f"| {PHASE_WORDS[name]} | {phase['seconds']:.1f} | {_percent(phase['share'])} | "
                     f"{'yes' if phase['overlaps'] else 'no: one candidate at a time'} |")
    b = report["builds"]
    lines += ["", f"builds: {b['compiled']} compiled ({', '.join(f'{n} {k}' for k, n in b['modes'].items()) or '-'}; "
                  f"{b['compile_seconds']:.1f} s of compiler time, median {b['compile_seconds_median']} s), "
                  f"{b['cached']} from the cache, {b['failed']} failed; candidates waited "
                  f"{b['wait_seconds']:.1f} s for them in all"]
    if gpu["memory_used_mib"]:
        lines.append(f"GPU memory used: {gpu['memory_used_mib']['min']:.0f}-{gpu['memory_used_mib']['max']:.0f} MiB; "
                     + (f"SM clock {gpu['sm_clock_mhz']['min']:.0f}-{gpu['sm_clock_mhz']['max']:.0f} MHz "
                        f"(median {gpu['sm_clock_mhz']['median']:.0f})" if gpu["sm_clock_mhz"] else "SM clock n/a"))
    return "\n".join(lines)


# --- the driver ------------------------------------------------------------------------------

def machine(gpu: dict) -> dict:
    import torch

    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    return {"gpu": gpu, "torch": torch.__version__, "torch_cuda": torch.version.cuda, "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0], "python": platform.python_version(), "commit": commit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20, help="candidates (default 20)")
    parser.add_argument("--jobs", type=int, default=4, help="kernelopt eval --jobs (default 4)")
    parser.add_argument("--timing-budget", type=float, default=10.0)
    parser.add_argument("--device", default="cuda", help="cuda or cuda:N (default cuda)")
    parser.add_argument("--build-cache", metavar="DIR",
                        help="the build cache (default: a fresh one, so every build is cold; a cache "
                             "an earlier run filled makes every build a cache hit)")
    parser.add_argument("--warm-pch", action="store_true",
                        help="run `kernelopt cache warm` first (timed and reported, not sampled)")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between NVML polls")
    parser.add_argument("--out", default="gpu_busy.json", help="the JSON report (default gpu_busy.json)")
    args = parser.parse_args()
    if args.count < 1 or args.jobs < 1:
        parser.error("--count and --jobs must be at least 1")
    try:
        source = open_nvml(args.device)
    except NvmlUnavailable as exc:
        sys.exit(f"gpu_busy: {exc}")
    facts = machine(source.describe())
    with tempfile.TemporaryDirectory(prefix="kernelopt-gpu-busy-") as scratch:
        folder = Path(scratch) / "candidates"
        folder.mkdir()
        write_candidates(folder, args.count)
        cache = Path(args.build_cache) if args.build_cache else Path(scratch) / "build-cache"
        fresh = not (cache / "entries").is_dir() or not any((cache / "entries").iterdir())
        warm = warm_cache(cache) if args.warm_pch else None
        command = eval_command(folder, args.device, args.jobs, args.timing_budget, cache)
        sampler = Sampler(source, interval=args.interval)
        sampler.start()
        try:
            batch = run_batch(command)
        finally:
            timeline = sampler.stop(until=time.time())
    settings = {"count": args.count, "jobs": args.jobs, "timing_budget": args.timing_budget, "device": args.device,
                "builds": "cold" if fresh else "cache filled before", "warm_pch_s": warm and round(warm, 1),
                "interval_s": args.interval}
    report = build_report(batch, timeline, facts, settings)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(markdown(report))
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()

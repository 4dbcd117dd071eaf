"""One evaluation, traced call by call: where each side's time went (issue 42's decisive trace).

Evaluates a candidate (by default the problem's exact copy: `Model` renamed `ModelNew`) and
prints, for every call of every phase (trials, timing rounds, the every-element check), the
side, the time that decided (`ms`), the window's wall time, the group's CPU time where it was
read, and the host's steps around the window: placing the inputs (into the device slots on a
GPU), thaw to answer, the freeze, and the keeper's take of the outputs. Then per side the mean
of the timed calls and of each step, the verdict's speedup and wall ratio, the evaluation's seconds, and the machine's
load average and GPU compute processes before and after. An exact copy whose sides differ in
one step names where a misreading lies. Usage:

    .venv/bin/python benchmarks/call_trace.py --problem KB/level1/1_Square_matrix_multiplication_.py \\
        [--candidate FILE] [--device cuda] [--timing-budget 2] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, correctness, every_element, evaluate
from kernelopt.sandbox.timing import rounds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_identity import as_candidate  # noqa: E402

STEPS = ("place", "answer", "freeze", "take")


def traced(phases: dict, clocks=None) -> list[dict]:
    """Wrap run_call where each phase calls it; every call's record lands in the returned list
    (with the GPU's clocks read just before the call, where `clocks` reads them)."""
    calls: list[dict] = []
    for phase, module in phases.items():
        original = module.run_call

        def wrapper(conversation, worker, input_set, *args, _original=original, _phase=phase, **kwargs):
            before = clocks() if clocks is not None else None
            call = _original(conversation, worker, input_set, *args, **kwargs)
            record = call.record
            calls.append({"phase": _phase, "side": worker.role, "seed": record.seed, "ms": record.ms,
                          "wall_ms": record.wall_ms, "cpu_ms": record.cpu_ms, "blocked_ms": record.blocked_ms,
                          "steps_ms": record.steps_ms, "transport": kwargs.get("transport"),
                          "pin_cpu": kwargs.get("pin_cpu"), "clocks_mhz": before,
                          "device_probe_ms": record.device_probe_ms})
            return call

        module.run_call = wrapper
    return calls


def timed_steps() -> dict[str, list[float]]:
    """Wrap the host's steps outside the windows (making inputs, comparing a round, the
    keeper's steps, the every-element check's keeping, the census): seconds per step name, so
    an evaluation's time beyond its calls is accounted for (an exact 4096^2 matmul copy took
    57 s on an H200, 34 s of it timing, of which its 52 timed windows were 0.3 s)."""
    from kernelopt.sandbox import census as census_module
    from kernelopt.sandbox.conversation import Conversation
    from kernelopt.sandbox.every_element import Kept

    seconds: dict[str, list[float]] = {}
    steps = {"make_inputs": (Conversation, "make_inputs"), "compare_round": (rounds, "compare_round"),
             "keeper_step": (rounds, "keeper_step"), "kept_outputs": (rounds, "kept_outputs"),
             "every_element.put": (Kept, "put"), "census.parallelism": (census_module, "parallelism"),
             "check_elements": (every_element, "check_elements")}
    for name, (owner, attr) in steps.items():
        original = getattr(owner, attr)

        def wrapper(*args, _original=original, _name=name, **kwargs):
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                seconds.setdefault(_name, []).append(time.perf_counter() - started)

        setattr(owner, attr, wrapper)  # on a class, a plain function is a method: self comes in args
    return seconds


def gpu_clocks():
    """A reader of the GPU's SM and memory clocks (MHz) through NVML, or None: read by the host
    before each call (outside its window), they show whether the device idles down between
    windows (an H200 idles at 345 MHz, boosts to 1980)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # noqa: BLE001 - no NVML, no clocks
        return None
    return lambda: (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM))


def machine_state() -> dict:
    state: dict = {"loadavg": os.getloadavg()}
    try:
        state["gpu_processes"] = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        state["gpu_processes"] = None
    return state


def summary(calls: list[dict]) -> dict:
    """Per side, the timed calls' mean time and each step's mean."""
    out = {}
    for side in ("reference", "candidate"):
        timed = [c for c in calls if c["side"] == side and c["phase"] == "timing"]
        if not timed:
            continue
        out[side] = {"calls": len(timed), "mean_ms": statistics.fmean(c["ms"] for c in timed),
                     "mean_wall_ms": statistics.fmean(c["wall_ms"] for c in timed),
                     **{f"mean_{step}_ms": statistics.fmean(c["steps_ms"].get(step, 0.0) for c in timed)
                        for step in STEPS}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, help="default: the problem's exact copy")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", type=Path, help="write the whole trace here")
    parser.add_argument("--isolation", default="auto", help="the sandbox backend (default: auto, the best available)")
    args = parser.parse_args()
    problem = load_problem(args.problem)
    source = args.candidate.read_text() if args.candidate else as_candidate(args.problem.read_text())
    clocks = gpu_clocks() if args.device.startswith("cuda") else None
    calls = traced({"trials": correctness, "timing": rounds, "every_element": every_element}, clocks)
    host_steps = timed_steps()
    before = machine_state()
    started = time.monotonic()
    result = evaluate(problem, source, EvalOptions(device=args.device, isolation=args.isolation, timing_budget=args.timing_budget,
                                                   timeout=args.timeout))
    evaluation_s = time.monotonic() - started
    after = machine_state()
    print(f"{'phase':14} {'side':9} {'ms':>10} {'wall':>10} {'cpu':>10} " + " ".join(f"{s:>8}" for s in STEPS)
          + "  sm/mem MHz before, idle probe ms")
    for c in calls:
        cpu = f"{c['cpu_ms']:10.3f}" if c["cpu_ms"] is not None else f"{'-':>10}"
        steps = " ".join(f"{c['steps_ms'].get(s, 0.0):8.3f}" for s in STEPS)
        mhz = "{}/{}".format(*c["clocks_mhz"]) if c["clocks_mhz"] else "-"
        probe = f"{c['device_probe_ms']:.4f}" if c["device_probe_ms"] is not None else "-"
        print(f"{c['phase']:14} {c['side']:9} {c['ms']:10.3f} {c['wall_ms']:10.3f} {cpu} {steps}  {mhz}, {probe}")
    outside = {name: {"calls": len(times), "total_s": round(sum(times), 3)} for name, times in host_steps.items()}
    outside["calls (run_call, all phases)"] = {"calls": len(calls), "total_s": round(sum(
        c["wall_ms"] + sum(c["steps_ms"].values()) for c in calls) / 1e3, 3)}
    sides = summary(calls)
    timing = result.timing.model_dump() if result.timing else None
    print(json.dumps({"status": result.status, "speedup": result.speedup, "message": result.message,
                      "method": timing and timing.get("method"), "wall_speedup": timing and timing.get("wall_speedup"),
                      "device_probe_ms": timing and timing.get("device_probe_ms"),
                      "evaluation_s": round(evaluation_s, 2), "durations_s": result.durations,
                      "host_steps": outside, "sides": sides, "before": before, "after": after}, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps({"calls": calls, "result": result.model_dump(mode="json"), "sides": sides,
                                         "evaluation_s": evaluation_s, "host_steps": outside, "before": before, "after": after}, default=str))


if __name__ == "__main__":
    main()

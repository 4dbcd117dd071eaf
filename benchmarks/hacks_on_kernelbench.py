"""The corpus's generic hacks against real KernelBench problems: is any judged correct and fast?

The adversarial tests run each hack on the small problem it names; a generic hack (one that works
on any problem, or any problem of a kind) is only as well caught as it is on problems it was not
written for. This runs chosen hacks against problems of a KernelBench checkout (exported with
benchmarks/kernelbench_identity.py or kernelbench_checkout.py), each pair `--runs` times, and
prints one line per evaluation and a summary; the acceptance line is "no hack correct above
1.5x". Usage:

    .venv/bin/python benchmarks/hacks_on_kernelbench.py --problems DIR/KernelBench/level1 \
        [--pairs default | HACK:ID,ID ...] [--runs 2] [--timing-budget 2] [--out results.jsonl]

`--pairs round4` is round four's generic candidates (issue 41) against ReLU, softmax and GELU,
with the kernel-work storms of 2026-11-29 (exact copies that make the reference pay for interrupts).
`--pairs default` is the families of round three (behaving differently when timed, helper
processes, timer forgery, objects in the harness's buffers) against the level-1 problems of
KernelBench's v0 sizes they apply to (the losses for the degenerate family; ReLU, softmax and
GELU for the rest). HACK is a file name in tests/adversarial/hacks; ID a problem id.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, evaluate

REPO = Path(__file__).resolve().parents[1]
HACKS = REPO / "tests" / "adversarial" / "hacks"
ACCEPTED_SPEEDUP = 1.5  # issue 29: no candidate of these families correct above this, on CPU

LOSSES = (94, 96, 97, 98, 100)  # degenerate outputs at v0 sizes: MSE, Huber, cosine, KL, hinge
ROWWISE = (19, 23, 88)  # ReLU, softmax, MinGPT GELU
DEFAULT_PAIRS = {
    "timed_running_mean_after_checks.py": LOSSES,
    "timed_run_header_from_frames.py": LOSSES,
    "timed_affinity_running_mean.py": (94, 97),
    "helper_exited_leader_splits_the_batch.py": ROWWISE,
    "helper_exited_leader_streams_memory.py": (19, 88),
    "helper_leaves_its_cgroup.py": (19,),
    "whitebox_timer_start_frame_rewrite.py": ROWWISE,
    "whitebox_timer_clock_rebound.py": ROWWISE,
    "whitebox_timer_start_small_jittered_shift.py": ROWWISE,
    "harness_buffer_dispatch_subclass.py": ROWWISE,
    "harness_inputs_dispatch_subclass.py": (19, 23),
}
# Round four (issue 41): the generic candidates that replace what they can reach of the harness in
# their process, or do work where the host does not look; against ReLU, softmax and GELU.
ROUND4_PAIRS = {
    "chaos_replace_every_harness_step.py": ROWWISE,
    "chaos_with_the_guard_blinded.py": ROWWISE,
    "timers_fire_in_the_reference_turn.py": ROWWISE,
    "loopback_pacing_fires_in_the_reference_turn.py": ROWWISE,
    "answer_then_finish_in_a_thread.py": ROWWISE,
    "cheaper_harness_description.py": ROWWISE,
    "constant_after_the_trials.py": ROWWISE,
    "describe_a_precomputed_buffer.py": ROWWISE,
}


def parse_pairs(words: list[str]) -> dict[str, tuple[int, ...]]:
    if words == ["default"]:
        return DEFAULT_PAIRS
    if words == ["round4"]:
        return ROUND4_PAIRS
    pairs = {}
    for word in words:
        hack, _, ids = word.partition(":")
        pairs[hack] = tuple(int(i) for i in ids.split(",") if i)
    return pairs


def problem_path(folder: Path, problem_id: int) -> Path:
    matches = sorted(folder.glob(f"{problem_id}_*.py"))
    if not matches:
        raise SystemExit(f"{folder}: no problem {problem_id}_*.py")
    return matches[0]


def judge(hack: str, problem_file: Path, options: EvalOptions) -> dict:
    problem = load_problem(problem_file)
    started = time.monotonic()
    result = evaluate(problem, (HACKS / hack).read_text(), options)
    return {"hack": hack, "problem": problem_file.stem, "status": result.status,
            "speedup": result.speedup, "flags": list(result.flags),
            "rules": list(result.rules), "seconds": round(time.monotonic() - started, 1),
            "message": (result.message or "")[:160]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", required=True, type=Path, help="a KernelBench level folder")
    parser.add_argument("--pairs", nargs="+", default=["default"])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, help="also write one JSON line per evaluation here")
    args = parser.parse_args()
    options = EvalOptions(device=args.device, timing_budget=args.timing_budget)
    rows = []
    for hack, ids in parse_pairs(args.pairs).items():
        for problem_id in ids:
            for _ in range(args.runs):
                row = judge(hack, problem_path(args.problems, problem_id), options)
                rows.append(row)
                speedup = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
                print(f"{hack:46s} {row['problem']:38s} {row['status']:10s} {speedup:>7s} "
                      f"rules {','.join(row['rules']) or '-'} flags {','.join(row['flags']) or '-'}  {row['seconds']} s", flush=True)
                if args.out:
                    with args.out.open("a") as out:
                        out.write(json.dumps(row) + "\n")
    fast = [r for r in rows if r["status"] == "correct" and (r["speedup"] or 0) > ACCEPTED_SPEEDUP]
    correct = [r for r in rows if r["status"] == "correct"]
    top = max((r["speedup"] or 0 for r in correct), default=None)
    print(f"{len(rows)} evaluations: {len(correct)} correct (highest {top:.2f}x)" if top else
          f"{len(rows)} evaluations: none correct", end="; ")
    print(f"{len(fast)} correct above {ACCEPTED_SPEEDUP}x" + (": " + ", ".join(
        f"{r['hack']} on {r['problem']} {r['speedup']:.2f}x" for r in fast) if fast else ""))


if __name__ == "__main__":
    main()

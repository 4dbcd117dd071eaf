"""One candidate judged by KernelBench's own evaluator, in a process of its own (not a script for
users: benchmarks/vs_kernelbench.py starts it with the interpreter that has KernelBench's
dependencies).

Reads one JSON request on stdin (`kernelbench`: the clone, `reference`, `candidate`, `device`,
`correct_trials`, `perf_trials`, `build_dir`) and prints the answer as the last line on stdout:
{"outcome": correct|incorrect|compile_error|error, "speedup", "runtime_us", "ref_runtime_us",
"detail", "excessive_speedup"}. Imports only the standard library, torch and the checkout.
"""

from __future__ import annotations

import inspect
import json
import sys


def their_evaluator(checkout: str):
    """`eval_kernel_against_ref` from the clone: `src/kernelbench/eval.py` (2025-10 and later) or
    the older `src/eval.py`."""
    sys.path.insert(0, f"{checkout}/src")
    try:
        from kernelbench.eval import eval_kernel_against_ref
    except ImportError as newer:
        sys.path.insert(0, checkout)
        try:
            from src.eval import eval_kernel_against_ref
        except ImportError as older:
            # Name the newer layout's failure too: a dependency of theirs missing (on a GPU
            # machine of 2026-11-28, openai's httpx2) read as "no module src.eval" alone.
            raise ImportError(f"{older}; kernelbench.eval: {newer}") from None
    return eval_kernel_against_ref


def judge(request: dict) -> dict:
    import torch

    evaluate = their_evaluator(request["kernelbench"])
    wanted = {"original_model_src": request["reference"], "custom_model_src": request["candidate"],
              "seed_num": 42, "num_correct_trials": request["correct_trials"],
              "num_perf_trials": request["perf_trials"], "measure_performance": True,
              "build_dir": request["build_dir"], "device": torch.device(request["device"]),
              "check_for_excessive_speedup": True}
    accepted = inspect.signature(evaluate).parameters
    result = evaluate(**{name: value for name, value in wanted.items() if name in accepted})
    return describe(result)


def describe(result) -> dict:
    """Their KernelExecResult as our answer (None: their evaluator gave up, e.g. a build lock)."""
    if result is None:
        return {"outcome": "error", "detail": "eval_kernel_against_ref returned None"}
    metadata = {key: str(value)[:400] for key, value in (getattr(result, "metadata", None) or {}).items()}
    runtime, ref_runtime = getattr(result, "runtime", -1.0), getattr(result, "ref_runtime", -1.0)
    if not result.compiled:
        outcome = "compile_error"
    elif not result.correctness:
        outcome = "incorrect"
    else:
        outcome = "correct"
    speedup = ref_runtime / runtime if outcome == "correct" and runtime > 0 and ref_runtime > 0 else None
    return {"outcome": outcome, "speedup": speedup, "runtime_us": runtime, "ref_runtime_us": ref_runtime,
            "excessive_speedup": bool(metadata.get("excessive_speedup") == "True"),
            "detail": "; ".join(f"{key}: {value}" for key, value in metadata.items())[:1200]}


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        answer = judge(request)
    except Exception as exc:  # noqa: BLE001 - any failure of theirs is reported, not raised
        answer = {"outcome": "error", "detail": f"{type(exc).__name__}: {exc}"[:1200]}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the thin loop costs inside every call's window, and where (docs/referee.md, I3).

Two parts:

1. The worker's own per-call steps (reading the call frame, unpacking the inputs, the program
   bracket, describing the outputs, writing the answer), run in this process on a 256-element
   ReLU: each step's median time warm (run again at once) and cold (after a sweep of 16 MB, as
   a worker's caches are after the host's and the other side's work between its calls).
2. A real sandboxed worker (the Evaluator's reference worker, loaded with the same problem):
   the group's CPU time per window for a thaw and freeze with nothing sent, a ping, and a call,
   back to back. The call's figure is the loop's share of every call on this machine, the same
   on both sides, so it compresses speedups of short calls toward 1x.

Usage: .venv/bin/python benchmarks/thin_loop.py [--calls 400] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
'''
SWEEP = bytearray(16 << 20)


def sweep() -> None:
    SWEEP[::64] = b"x" * len(SWEEP[::64])


def warm_and_cold(step: Callable[[], object], repeats: int = 300) -> tuple[float, float]:
    """Median microseconds of `step` run again at once, and after a sweep of the caches."""
    for _ in range(50):
        step()
    warm, cold = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        step()
        warm.append(time.perf_counter() - began)
        sweep()
        began = time.perf_counter()
        step()
        cold.append(time.perf_counter() - began)
    return statistics.median(warm) * 1e6, statistics.median(cold) * 1e6


def in_process_steps() -> dict[str, dict[str, float]]:
    from kernelopt.sandbox.worker import commands, measure, transfer, wire
    from kernelopt.sandbox.worker import main as worker_main
    from kernelopt.sandbox.worker.turns import harness_turn, program_code

    torch.set_num_threads(1)
    x = torch.randn(256)
    spec, placed, size = transfer.plan([x])
    slot = mmap.mmap(-1, 1 << 20)
    transfer.fill(placed, slot, 0)
    to_worker, from_host = wire.pipe()
    to_host, from_worker = wire.pipe()
    worker = worker_main.Worker("candidate", wire.FrameReader(to_worker), from_worker)
    worker.inputs_map, worker.model, worker.device = slot, torch.nn.ReLU(), torch.device("cpu")
    harness_turn()
    message = {**commands.call(1, spec, transport=commands.MEMORY, pin_cpu=None), "slot": size, "at": 0}
    frame = wire.encode_header(message)
    output = torch.relu(x)
    answer, _ = measure.describe_outputs(output, [x], commands.MEMORY)

    def bracket() -> None:
        with program_code():
            pass

    steps: dict[str, Callable[[], object]] = {
        "read the call frame": lambda: (os.write(from_host, frame), worker.reader.read()),
        "unpack the inputs": lambda: worker._receive_inputs(message, []),
        "the program bracket (signals, collector)": bracket,
        "the program (a 256-element ReLU)": lambda: worker.model(x),
        "describe the outputs": lambda: measure.describe_outputs(output, [x], commands.MEMORY),
        "write the answer": lambda: (wire.write_frame(from_worker, {"ok": True, **answer}), os.read(to_host, 1 << 16)),
        "the whole call step (unpack to describe)": lambda: worker.call(message, []),
    }
    found = {}
    for name, step in steps.items():
        warm, cold = warm_and_cold(step)
        found[name] = {"warm_us": round(warm, 1), "cold_us": round(cold, 1)}
    return found


def sandboxed_worker(calls: int) -> dict[str, dict[str, float]]:
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import EvalOptions
    from kernelopt.sandbox import calls as host_calls
    from kernelopt.sandbox.batch import Evaluator
    from kernelopt.sandbox.conversation import Conversation
    from kernelopt.sandbox.session import load_message
    from kernelopt.sandbox.worker import commands

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tiny_relu.py"
        path.write_text(PROBLEM)
        problem = load_problem(path)
        with Evaluator(problem, EvalOptions(device="cpu")) as evaluator:
            worker = evaluator._warm.ready()
            conversation = Conversation(problem, time.monotonic() + 600, lambda request: {})
            conversation.reference = worker
            conversation.ask(worker, load_message(evaluator.backend, "cpu", worker.scratch, host_builds=False,
                                                  with_candidate=False))
            sets = conversation.make_inputs(list(range(1, 41)))
            transport = host_calls.transport_for([worker], "cpu")
            worker.freeze()

            def group_cpu_us(step: Callable[[], object]) -> float:
                before = worker.cpu_seconds()
                step()
                return ((worker.cpu_seconds() or 0.0) - (before or 0.0)) * 1e6

            def thaw_and_freeze() -> None:
                worker.thaw()
                worker.freeze()

            def ping() -> None:
                worker.thaw()
                worker.send(commands.ping(secrets.randbits(40)))
                worker.receive(time.monotonic() + 10)
                worker.freeze()

            counter = iter(range(10**9))
            windows: dict[str, Callable[[], object]] = {
                "thaw and freeze, nothing sent": thaw_and_freeze,
                "a ping": ping,
                "a call (256-element ReLU)": lambda: host_calls.run_call(
                    conversation, worker, sets[next(counter) % len(sets)], transport=transport, device="cpu"),
            }
            found = {}
            for name, window in windows.items():
                readings = [group_cpu_us(window) for _ in range(calls)]
                found[name] = {"median_us": round(statistics.median(readings), 1),
                               "mean_us": round(statistics.fmean(readings), 1)}
            found["members of the group"] = {"count": len(worker.contained.members())}
            return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = {"machine": os.uname().nodename, "cores": os.cpu_count(), "torch": torch.__version__,
              "in_process_steps": in_process_steps(), "sandboxed_worker_group_cpu": sandboxed_worker(args.calls)}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()

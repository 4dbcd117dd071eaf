"""The `profile` command: one advisory profiling pass over the loaded model, after its verdict.

Runs in each side's own worker (the reference in the trusted reference worker, a candidate in
its sandbox) on one input set the host hands over as it hands over the timed calls' inputs.
Nothing here is timed or judged: the host turns the reply into feedback for the model
(kernelopt/sandbox/profiling.py), and any failure becomes a note there, never a verdict.

- torch.profiler: per GPU kernel (per op, by self time, on a CPU) the time per forward and the
  number of launches, over a few calls after a warm-up call;
- in the reference worker only: the problem's FLOPs (torch.utils.flop_counter's formulas) and the bytes of
  one call's inputs, outputs and weights (a lower bound on the bytes moved), for the roofline;
- on a GPU where Nsight Compute (ncu) is installed and may read the counters: DRAM and SM
  throughput and achieved occupancy per kernel, from a child process that loads the same model
  and runs one forward under ncu.

Imports only the standard library, torch and this package (it runs inside the sandbox).
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import time

TOP_ROWS = 5  # kernels (ops) named in the reply; the rest are summed into "other"
MAX_ITERATIONS = 10
NAME_CHARS = 160
NCU_LAUNCHES = 20  # kernels measured by ncu per side
NCU_TIMEOUT_S = 90.0
NCU_RANGE = "kernelopt_profile"
# Nsight Compute metric per reply key, all in % of the peak (the same counters ncu's
# SpeedOfLight and Occupancy sections show).
NCU_METRICS = {
    "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
}
_PRECISIONS = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float64": "fp64"}


def profile_model(model, inputs, device, *, budget_s: float, count_work: bool, ncu: dict | None) -> dict:
    """The reply to `profile`: {"ok", "unit", "iterations", "total_ms", "rows", "notes"}, with
    "flops", "bytes", "precision" when `count_work`, and "ncu" (kernel name -> metrics) when
    `ncu` (the child's settings) is given and Nsight Compute works here."""
    import torch

    notes: list[str] = []
    output = model(*inputs)  # warm-up (the worker sat idle since its timed calls)
    _synchronize(device)
    began = time.perf_counter()
    output = model(*inputs)  # how long a call takes, and the output's size for the bytes
    _synchronize(device)
    once_s = time.perf_counter() - began
    reply: dict = {"ok": True, "notes": notes}
    if count_work:
        reply.update(work_counts(model, inputs, output, notes))
    del output
    iterations = max(1, min(MAX_ITERATIONS, int(budget_s / max(once_s, 1e-6))))
    reply.update(torch_profile(model, inputs, device, iterations))
    if ncu is not None and device.type == "cuda":
        metrics = ncu_metrics(ncu, inputs, notes)
        if metrics:
            reply["ncu"] = metrics
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the reference worker stays warm: leave its memory as it was
    return reply


def torch_profile(model, inputs, device, iterations: int) -> dict:
    """Per-kernel (GPU) or per-op self time (CPU) over `iterations` forwards, per forward: the
    largest TOP_ROWS and "other". On a CPU, the autograd profiler without Kineto: the same op
    events, without Kineto's start-up (2 s of the 2-core machine's time per process)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    gpu = device.type == "cuda"
    recorder: profile | torch.autograd.profiler.profile
    if gpu:
        recorder = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    else:
        recorder = torch.autograd.profiler.profile(use_kineto=False)
    with recorder:
        for _ in range(iterations):
            model(*inputs)
        _synchronize(device)
    times: dict[str, float] = {}
    counts: dict[str, int] = {}
    # (the autograd profiler is the CPU's: not gpu)
    events = recorder.function_events if isinstance(recorder, torch.autograd.profiler.profile) else recorder.events()
    for event in events:
        if gpu:
            if event.device_type != DeviceType.CUDA:
                continue
            us = event.time_range.elapsed_us()
        else:
            if event.device_type != DeviceType.CPU:
                continue
            us = event.self_cpu_time_total
        name = str(event.name)[:NAME_CHARS]
        times[name] = times.get(name, 0.0) + float(us)
        counts[name] = counts.get(name, 0) + 1
    total_us = sum(times.values())
    ranked = sorted(times, key=lambda name: times[name], reverse=True)
    rows = [_row(name, times[name], counts[name], total_us, iterations) for name in ranked[:TOP_ROWS]]
    rest = ranked[TOP_ROWS:]
    if rest:
        rows.append(_row("other", sum(times[n] for n in rest), sum(counts[n] for n in rest), total_us, iterations))
    return {"unit": "kernel" if gpu else "op", "iterations": iterations,
            "total_ms": total_us / 1e3 / iterations, "rows": rows}


def _row(name: str, us: float, count: int, total_us: float, iterations: int) -> dict:
    return {"name": name, "share": us / total_us if total_us > 0 else 0.0, "calls": count / iterations,
            "ms": us / 1e3 / iterations}


def work_counts(model, inputs, output, notes: list[str]) -> dict:
    """The problem's FLOPs (torch's flop counter: matmuls, convolutions, attention; other ops
    count 0), and the bytes of the call's inputs, outputs and the model's weights, each moved
    at least once (a lower bound), with the inputs' precision."""
    from . import measure

    found: dict = {}
    try:
        found["flops"] = count_flops(model, inputs)
    except Exception as exc:  # noqa: BLE001 - advisory: a note, not a failure
        notes.append(f"FLOPs not counted: {type(exc).__name__}: {str(exc)[:200]}")
    tensors = measure.tensors_in(inputs)
    try:
        tensors += measure.flatten_outputs(output)
    except measure.OutputError:
        notes.append("the output's bytes not counted: not plain tensors")
    if hasattr(model, "parameters") and hasattr(model, "buffers"):  # the weights, read at least once
        tensors += [*model.parameters(), *model.buffers()]
    found["bytes"] = sum(t.numel() * t.element_size() for t in tensors)
    by_dtype: dict[str, int] = {}
    for t in measure.tensors_in(inputs):
        if t.is_floating_point():
            by_dtype[str(t.dtype)] = by_dtype.get(str(t.dtype), 0) + t.numel() * t.element_size()
    if by_dtype:
        found["precision"] = _PRECISIONS.get(max(by_dtype, key=lambda dtype: by_dtype[dtype]))
    return found


def count_flops(model, inputs) -> int:
    """One forward's FLOPs by torch's flop counter's formulas (torch.utils.flop_counter's
    registry, the numbers FlopCounterMode gives) in a dispatch mode of our own: FlopCounterMode's
    mode imports torch._dynamo on first use, 2 s of the 2-core machine, for nothing we need."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class FlopCount(TorchDispatchMode):
        total = 0

        @classmethod
        def _should_skip_dynamo(cls) -> bool:  # no torch._dynamo around our own dispatch
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                self.total += int(formula(*args, **kwargs, out_val=out))
            return out

    with FlopCount() as counter:
        model(*inputs)
    return counter.total


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Nsight Compute ---------------------------------------------------------------------------------

def find_ncu() -> str | None:
    """The ncu executable: on PATH, in the CUDA toolkit, or in a standalone Nsight Compute."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"):
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


def ncu_metrics(settings: dict, inputs, notes: list[str]) -> dict[str, dict[str, float]]:
    """Kernel name -> {"dram", "sm", "occupancy"} (% of peak, mean over its launches), measured
    by ncu around one forward of the same model in a child process; {} with a note when ncu is
    missing, may not read the counters (ERR_NVGPUCTRPERM) or fails."""
    import torch

    ncu = find_ncu()
    if ncu is None:
        notes.append("Nsight Compute (ncu) not found: no per-kernel throughput metrics")
        return {}
    workdir = settings["workdir"]
    os.makedirs(workdir, exist_ok=True)
    inputs_path = os.path.join(workdir, "profile_inputs.pt")
    torch.save([t.cpu() if isinstance(t, torch.Tensor) else t for t in inputs], inputs_path)
    spec_path = os.path.join(workdir, "profile_child.json")
    with open(spec_path, "w", encoding="utf-8") as handle:
        json.dump(dict(settings, inputs_path=inputs_path), handle)
    command = [ncu, "--csv", "--target-processes", "all", "--nvtx", "--nvtx-include", f"{NCU_RANGE}/",
               "--launch-count", str(NCU_LAUNCHES), "--metrics", ",".join(NCU_METRICS.values()),
               *child_command(spec_path)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NCU_TIMEOUT_S, cwd=workdir)
    except subprocess.TimeoutExpired:
        notes.append(f"Nsight Compute did not finish in {NCU_TIMEOUT_S:g} s: no per-kernel metrics")
        return {}
    except OSError as exc:
        notes.append(f"Nsight Compute could not start: {exc}")
        return {}
    text = done.stdout + "\n" + done.stderr
    if "ERR_NVGPUCTRPERM" in text:
        notes.append("Nsight Compute may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): "
                     "no per-kernel metrics")
        return {}
    metrics = parse_ncu_csv(done.stdout)
    if not metrics:
        tail = " ".join(text.strip().splitlines()[-3:])[:300]
        notes.append(f"Nsight Compute reported no kernels (exit {done.returncode}): {tail}")
    return metrics


def child_command(spec_path: str) -> list[str]:
    """The child process ncu runs: this interpreter, isolated like the worker, on ncu_child."""
    boot = ("import sys; sys.path.insert(0, {path!r}); from worker.extensions import ExtensionTracker; "
            "from worker.profiling import ncu_child; ncu_child(sys.argv[1], ExtensionTracker)"
            ).format(path=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return [sys.executable, "-E", "-s", "-c", boot, spec_path]


def parse_ncu_csv(text: str) -> dict[str, dict[str, float]]:
    """ncu --csv's rows (one per kernel launch and metric) as kernel name -> metric key -> the
    mean over its launches."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return {}
    keys = {metric: key for key, metric in NCU_METRICS.items()}
    sums: dict[str, dict[str, list[float]]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        key = keys.get(row.get("Metric Name", ""))
        name = (row.get("Kernel Name") or "")[:NAME_CHARS]
        try:
            value = float((row.get("Metric Value") or "").replace(",", ""))
        except ValueError:
            continue
        if key and name:
            sums.setdefault(name, {}).setdefault(key, []).append(value)
    return {name: {key: sum(values) / len(values) for key, values in found.items()}
            for name, found in sums.items()}


def ncu_child(spec_path: str, tracker_class) -> None:
    """The process ncu starts: the same problem (and candidate) as the worker, the model made
    from the same init seed, one warm-up forward, then one forward inside the NVTX range that
    ncu measures. Extensions the host built for the worker are loaded from where it put them
    (`tracker_class`: extensions.ExtensionTracker, passed in by the boot line: main imports this module)."""
    import importlib.util

    import torch

    from . import measure

    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    delivered = spec.get("delivered") or {}
    if delivered:
        tracker = tracker_class()
        tracker.install()
        tracker.request_build = lambda request: ({"ok": True, "path": delivered[request["name"]]}
                                                 if request["name"] in delivered else
                                                 {"ok": False, "error": "not built for the worker"})

    def load(name: str, path: str):
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"{path} cannot be imported as a module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        return module

    problem = load("kernelopt_problem", spec["problem_path"])
    measure.set_seed(spec["init_seed"])
    init_inputs = problem.get_init_inputs()
    if spec.get("candidate_path"):
        model_class = load("kernelopt_candidate", spec["candidate_path"]).ModelNew
    else:
        model_class = problem.Model
    measure.set_seed(spec["init_seed"])
    model = model_class(*init_inputs)
    if hasattr(model, "to"):
        model = model.to(device)
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in torch.load(spec["inputs_path"])]
    model(*inputs)
    _synchronize(device)
    gpu = device.type == "cuda"  # (a CPU run is only a test of the above: no NVTX there)
    if gpu:
        torch.cuda.nvtx.range_push(NCU_RANGE)
    output = model(*inputs)
    _synchronize(device)
    if gpu:
        torch.cuda.nvtx.range_pop()
    shapes = [list(t.shape) for t in measure.flatten_outputs(output)]
    print(json.dumps({"profiled": spec.get("candidate_path") or spec["problem_path"], "outputs": shapes}),
          file=sys.stderr)

"""Baselines: the reference under PyTorch's own execution modes, measured by the same referee
on the same device, stored per (problem, device, software versions) and reused.

Each baseline is judged as a candidate: a `ModelNew` that wraps the problem's own `Model`
(torch.compile in one of its modes, or a CUDA graph of eager), so its time comes from the same
interleaved timing against the reference as any candidate's, and a baseline that is wrong
(a compile bug) is caught like any candidate. `eager` is the reference itself (speedup 1).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from kernelopt.kernelbench import Problem
from kernelopt.sandbox import EvalOptions, Evaluator
from kernelopt.sandbox.device import device_model

# name -> torch.compile mode ("graphs": CUDA graph of eager; None: the reference itself)
BASELINES = {
    "eager": None,
    "compile": "default",
    "compile-max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs",
    "compile-reduce-overhead": "reduce-overhead",
    "cuda-graphs": "graphs",
}
CPU_BASELINES = ("eager", "compile")  # the others need CUDA

_COMPILED = '''

class ModelNew(nn.Module):
    """kernelopt baseline: the reference under torch.compile(mode={mode!r})."""

    def __init__(self, *init_inputs):
        super().__init__()
        # Leave no thread or process behind, which the referee rightly rejects in any candidate:
        # compile in this thread (no inductor worker pool) and keep tqdm, which autotuning's
        # progress bars use, from starting its monitor thread.
        import torch._inductor.config
        torch._inductor.config.compile_threads = 1
        try:
            import tqdm
            tqdm.tqdm.monitor_interval = 0
        except ImportError:
            pass
        self.model = torch.compile(Model(*init_inputs), mode={mode!r})

    def forward(self, *inputs):
        return self.model(*inputs)
'''

_GRAPHED = '''

class ModelNew(nn.Module):
    """kernelopt baseline: the reference's eager forward captured in a CUDA graph and replayed
    (inputs copied into the graph's buffers, outputs cloned out: the honest cost of a graph)."""

    def __init__(self, *init_inputs):
        super().__init__()
        self.model = Model(*init_inputs)
        self._graph, self._key = None, None

    def _capture(self, inputs):
        self._static = [t.clone() for t in inputs]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                self.model(*self._static)
        torch.cuda.current_stream().wait_stream(stream)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._output = self.model(*self._static)

    def forward(self, *inputs):
        key = tuple((t.shape, t.dtype, t.device) for t in inputs)
        if key != self._key:
            self._capture(inputs)
            self._key = key
        for static, given in zip(self._static, inputs):
            static.copy_(given)
        self._graph.replay()
        if isinstance(self._output, torch.Tensor):
            return self._output.clone()
        return type(self._output)(t.clone() for t in self._output)
'''


def baseline_source(problem: Problem, name: str) -> str:
    """The candidate source that realises baseline `name` for `problem`."""
    mode = BASELINES[name]
    if mode is None:
        raise ValueError("eager is the reference itself")
    wrapper = _GRAPHED if mode == "graphs" else _COMPILED.format(mode=mode)
    return problem.source.rstrip() + "\n" + wrapper


class BaselineStore:
    """One JSON file: {key: {baseline: record}}, the key naming the problem's content hash, the
    device (the GPU's model, not just its index) and the software versions, so a changed
    problem, GPU or torch gets new numbers."""

    def __init__(self, path: str | Path | None = None):
        default = Path(os.environ.get("KERNELOPT_BASELINES", "~/.cache/kernelopt/baselines.json"))
        self.path = Path(path or default).expanduser()
        self.data: dict = json.loads(self.path.read_text()) if self.path.exists() else {}
        self._lock = threading.Lock()  # problems measured concurrently (--ray) write from several threads

    def get(self, key: str) -> dict:
        with self._lock:
            return dict(self.data.get(key, {}))

    def put(self, key: str, name: str, record: dict) -> None:
        with self._lock:
            self.data.setdefault(key, {})[name] = record
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(self.data, indent=1, sort_keys=True))
            os.replace(temporary, self.path)  # never a half-written store


def store_key(problem: Problem, options: EvalOptions, device: str, model: str | None = None) -> str:
    """`model`: the device's model where it is not this machine's (a cluster's actors)."""
    import torch

    image = f"|image {options.image}" if options.isolation == "docker" else ""
    return (f"{problem.content_hash}|{model or device_model(device)}|torch {torch.__version__}|"
            f"cuda {torch.version.cuda}{image}")


def measure_baselines(problem: Problem, names: list[str], options: EvalOptions, device: str,
                      store: BaselineStore, report=lambda line: None, pool=None) -> dict:
    """The baselines `names` for `problem` on `device`: from the store where present, measured
    (each judged as a candidate, so also checked for correctness) otherwise. Returns
    {name: record} with `status`, `ms`, `speedup_vs_eager`. `pool`: measure on a Ray cluster's
    judging actors (kernelopt.cluster.JudgePool; stored under their device model); the store is
    written here, by the driver, only."""
    key = store_key(problem, options, device, pool.device_models[0] if pool is not None else None)
    missing = [n for n in names if n not in store.get(key)]
    if missing:
        compiled = [n for n in missing if n != "eager"]
        reference_ms = None
        for index, result in _verdicts(problem, options, [baseline_source(problem, n) for n in compiled], pool):
            name = compiled[index]
            reference_ms = result.reference_ms or reference_ms
            store.put(key, name, {"status": result.status, "ms": result.candidate_ms,
                                  "speedup_vs_eager": result.speedup,
                                  "message": "" if result.correct else result.message[:500]})
            report(f"{problem.name}: {name} {result.status}"
                   + (f" {result.speedup:.2f}x vs eager" if result.speedup else ""))
        if "eager" in missing:
            if reference_ms is None:  # eager alone: time the reference against itself
                itself = problem.source.replace("class Model(", "class ModelNew(", 1)
                reference_ms = next(_verdicts(problem, options, [itself], pool))[1].reference_ms
            store.put(key, "eager", {"status": "correct", "ms": reference_ms, "speedup_vs_eager": 1.0,
                                     "message": ""})
    stored = store.get(key)
    return {name: stored[name] for name in names}


def _verdicts(problem: Problem, options: EvalOptions, sources: list[str], pool):
    """(index, verdict) for each source, one judged at a time: on this machine, each as it is
    reached; on a cluster's actor, all when the call returns."""
    if not sources:
        return
    if pool is not None:
        yield from enumerate(pool.judge(problem, options, sources)["results"])
        return
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        yield from evaluator.evaluate_many(sources, jobs=1)


def default_names(device: str, requested: list[str] | None = None) -> list[str]:
    """The requested baselines, checked; by default all that the device supports."""
    names = requested or (list(BASELINES) if device.startswith("cuda") else list(CPU_BASELINES))
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {', '.join(unknown)} (known: {', '.join(BASELINES)})")
    if not device.startswith("cuda"):
        gpu_only = [n for n in names if n not in CPU_BASELINES]
        if gpu_only:
            raise ValueError(f"baseline(s) {', '.join(gpu_only)} need a CUDA device")
    return names


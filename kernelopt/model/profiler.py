"""Where a model's forward time goes, by submodule path (torch.profiler, on the CPU too).

Every submodule call is wrapped in a `record_function` range named after its path (forward
pre/post hooks). A module's time is what ran inside its calls, its children's included:

- on a GPU, device time from torch.profiler: each kernel's time goes through the op that
  launched it to the innermost module range around that op, and to every module around it;
- on the CPU, the thread's CPU clock read by the same hooks (torch runs single-threaded, as in
  the referee's timed calls): the profiler's clock is wall time, which a loaded host inflates
  at random (a preempted thread charges its wait to whatever op was running), where the
  thread's CPU time counts only the work. The profiler still names each spot's main ops.

Times come from the fastest profiled forward (one forward, so that shares add up, and the one
the host disturbed least).

Hot spots are the frontier of that tree: starting from the model's direct submodules, a spot
holding more than `split` of the forward time is replaced by its submodules (the time they do
not cover stays with the parent as an unattributed rest), until no spot with submodules holds
more than `split`; a spot whose own code (outside its submodules) holds more than a quarter of
its time is never split, since that code would belong to no spot. The time in the model's own
forward outside every submodule is reported as the `(model)` row: it cannot be extracted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

RANGE = "kernelopt.module::"
STEP = "kernelopt.step::"          # one profiled forward (and backward, when training)
BACKWARD = "autograd::engine::evaluate_function: "
ROOT = ""
COVERED = 0.75    # a spot is split only where its submodules hold this much of its time


@dataclass
class Signature:
    """One call's positional arguments: tensors as shape/dtype, others as their repr."""

    args: list[dict]
    kwargs: list[str]

    def key(self) -> tuple:
        return tuple(tuple(sorted((k, str(v)) for k, v in a.items())) for a in self.args) + tuple(self.kwargs)


@dataclass
class Spot:
    path: str
    kind: str                      # class name
    ms: float                      # per forward
    share: float
    calls: float                   # per forward
    inputs: list[dict]             # the most frequent signature's arguments
    kwargs: list[str]              # keyword arguments' names seen (extraction refuses them)
    signatures: int                # distinct signatures seen
    other_inputs: list[list[dict]]  # the next most frequent signatures that differ only in tensor shapes
    ops: list[str]                 # the ops that take most of its time (profiler, self time)
    free_bound: float | None       # end-to-end speedup if the spot took no time (Amdahl; None: unbounded)
    half_bound: float              # ... if it ran 2x faster

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class ModelProfile:
    model: str
    device: str
    forwards: int
    unit: str                      # "thread cpu time" | "device time"
    forward_ms: float              # the fastest profiled forward (the hooks' own cost included)
    spots: list[Spot]
    model_self: float              # share of the model's own forward outside every submodule
    modules: dict[str, float] = field(default_factory=dict)   # every called module path -> share
    every: dict[str, Spot] = field(default_factory=dict)      # every called submodule as a Spot
    threads: int = 1                                          # torch's CPU threads while profiling

    def to_json(self) -> dict:
        return {"model": self.model, "device": self.device, "forwards": self.forwards, "unit": self.unit,
                "threads": self.threads,
                "forward_ms": self.forward_ms, "model_self_share": self.model_self,
                "spots": [s.to_json() for s in self.spots], "modules": self.modules}


def amdahl(share: float, speedup: float | None) -> float:
    """End-to-end speedup when a part holding `share` of the time gets `speedup` (None: free)."""
    rest = 1.0 - share + (0.0 if speedup is None else share / speedup)
    return 1.0 / rest if rest > 0 else float("inf")


def bounded(value: float) -> float | None:
    """Rounded for the report; None for an unbounded speedup (a spot holding the whole forward)."""
    return round(value, 3) if value != float("inf") else None


def combined_amdahl(parts: list[tuple[float, float]]) -> float:
    """Several disjoint parts (share, speedup) at once."""
    rest = 1.0 - sum(s for s, _ in parts) + sum(s / k for s, k in parts)
    return 1.0 / rest if rest > 0 else float("inf")


def profile_model(loaded, device: str = "cpu", forwards: int = 10, warmup: int = 2, split: float = 0.35,
                  threads: int = 1, training: bool = False) -> ModelProfile:
    """Profiles `forwards` calls of the loaded model's forward (after `warmup`), single-threaded
    on the CPU like the referee's timed calls; `training`: each a training step, the forward and
    the backward for a random upstream gradient, whose backward ops count for the module whose
    forward op made them (`attribute_training`)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    model, inputs = loaded.model, loaded.inputs
    signatures: dict[str, list[Signature]] = {}
    open_ranges: dict[int, list] = {}
    handles = []
    recording = [False]

    thread_times: list[dict[str, float]] = []   # per profiled forward: path -> thread CPU us

    def pre(module, args, kwargs, path):
        if recording[0]:
            signatures.setdefault(path, []).append(signature(args, kwargs))
            if path == ROOT:
                thread_times.append({})
        scope = record_function(RANGE + path)
        scope.__enter__()
        open_ranges.setdefault(id(module), []).append((scope, time.thread_time_ns()))

    def post(module, args, kwargs, output, path):
        scope, started = open_ranges[id(module)].pop()
        elapsed = (time.thread_time_ns() - started) / 1000
        scope.__exit__(None, None, None)
        if recording[0] and thread_times:
            totals = thread_times[-1]
            totals[path] = totals.get(path, 0.0) + elapsed

    for path, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(
            lambda m, a, k, p=path: pre(m, a, k, p), with_kwargs=True))
        handles.append(module.register_forward_hook(
            lambda m, a, k, o, p=path: post(m, a, k, o, p), with_kwargs=True))
    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    run = training_step(model, inputs) if training else (lambda: model(*inputs))
    try:
        with torch.set_grad_enabled(training):
            for _ in range(warmup):
                run()
            if cuda:
                torch.cuda.synchronize()
            recording[0] = True
            with without_profiler_chatter(), profile(activities=activities) as prof:
                for index in range(forwards):
                    with record_function(f"{STEP}{index}"):
                        run()
                if cuda:
                    torch.cuda.synchronize()
            recording[0] = False
    finally:
        for handle in handles:
            handle.remove()
        torch.set_num_threads(previous_threads)
    if training:
        inclusive, ops = attribute_training(prof.events(), cuda)
    else:
        device_times, ops = attribute(prof.events(), cuda)
        inclusive = device_times if cuda else fastest(thread_times)
    kinds = {path: type(m).__name__ for path, m in model.named_modules()}
    children = child_paths(model)
    found = summarize(loaded.problem.name, device, forwards, cuda, inclusive, signatures, kinds, children, split, ops)
    found.threads = threads or previous_threads
    return found


# What the profiler's native library (kineto) writes to the process's stderr at each start and
# stop, whatever the log level: "USDT:<date> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] ...".
_CHATTER = b"USDT:"


@contextlib.contextmanager
def without_profiler_chatter():
    """Hold the process's native stderr (file descriptor 2) in a temporary file while the
    profiler runs, then pass on every line but the profiler's own tracing chatter: stderr is
    for kernelopt's messages and the user's program's."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True) if not line.startswith(_CHATTER)]
            if kept:
                os.write(2, b"".join(kept))


def signature(args, kwargs) -> Signature:
    import torch

    described = []
    for value in args:
        if isinstance(value, torch.Tensor):
            entry: dict[str, object] = {"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", "")}
            if not value.is_floating_point() and not value.is_complex() and value.numel():
                entry["low"], entry["high"] = int(value.min()), int(value.max())
            described.append(entry)
        else:
            described.append({"value": repr(value), "type": type(value).__name__})
    return Signature(described, sorted(kwargs))


def attribute(events, cuda: bool) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """From the profiler's events: (module path -> inclusive device time in us, in the fastest
    profiled forward; module path -> op name -> self time over all forwards). Each op's self
    time goes to the innermost module range around it and to every module around that one."""
    from torch.autograd import DeviceType

    per_forward: dict[int, dict[str, float]] = {}
    ops: dict[str, dict[str, float]] = {}
    for event in events:
        if event.device_type != DeviceType.CPU:   # kernels count through the op that launched them
            continue
        own = (getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)) \
            if cuda else event.self_cpu_time_total
        if not own:
            continue
        node = event
        while node is not None and not node.name.startswith(RANGE):
            node = node.cpu_parent
        if node is None:
            continue
        top = node
        while top.cpu_parent is not None:
            top = top.cpu_parent
        totals = per_forward.setdefault(top.id, {})
        path = node.name[len(RANGE):]
        while True:   # the innermost module and every module around it
            totals[path] = totals.get(path, 0.0) + own
            if event is not node:
                named = ops.setdefault(path, {})
                named[event.name] = named.get(event.name, 0.0) + own
            if path == ROOT:
                break
            path = path.rpartition(".")[0]
    return fastest(list(per_forward.values())), ops


def fastest(per_forward: list[dict[str, float]]) -> dict[str, float]:
    """The attribution of the fastest forward: one forward, so that shares add up, and the one
    the host disturbed least (interference only ever adds time)."""
    forwards = [totals for totals in per_forward if totals.get(ROOT)]
    return min(forwards, key=lambda totals: totals[ROOT]) if forwards else {}


def child_paths(model) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path, module in model.named_modules():
        out[path] = [f"{path}.{name}" if path else name for name, _ in module.named_children()]
    return out


def frontier(times: dict[str, float], called: set[str], children: dict[str, list[str]],
             split: float) -> list[str]:
    """The hot spots' paths (see the module's docstring). Containers never called themselves
    (ModuleList, ModuleDict) are always looked through."""
    total = times.get(ROOT, 0.0) or 1.0
    pending = [ROOT]
    spots = []
    while pending:
        path = pending.pop()
        timed = [c for c in children.get(path, []) if times.get(c)]
        own = times.get(path, 0.0)
        covered = sum(times[c] for c in timed)
        if path == ROOT or path not in called or (
                timed and own / total > split and covered >= COVERED * own):
            pending.extend(timed)
        else:
            spots.append(path)
    return spots


def summarize(name, device, forwards, cuda, inclusive, signatures, kinds, children, split, ops) -> ModelProfile:
    total = inclusive.get(ROOT, 0.0)
    if total <= 0:
        raise RuntimeError("the profiler recorded no time in the model's forward")
    looked_through = lookthrough(inclusive, children)
    every = {}
    for path in signatures:
        if path == ROOT:
            continue
        share = looked_through.get(path, 0.0) / total
        seen = signatures.get(path, [])
        common = most_common(seen)
        every[path] = (Spot(path=path, kind=kinds[path], ms=round(looked_through.get(path, 0.0) / 1000, 4),
                          share=round(share, 4), calls=round(len(seen) / forwards, 2),
                          inputs=common.args if common else [], kwargs=common.kwargs if common else [],
                          signatures=len({s.key() for s in seen}), other_inputs=other_shapes(seen, common),
                          ops=top_ops(ops.get(path, {})),
                          free_bound=bounded(amdahl(share, None)), half_bound=round(amdahl(share, 2.0), 3)))
    spots = [every[path] for path in frontier(looked_through, set(signatures) | {ROOT}, children, split)]
    spots.sort(key=lambda s: -s.share)
    covered = sum(looked_through.get(c, 0.0) for c in children.get(ROOT, []))
    modules = {path or "(model)": round(t / total, 4) for path, t in sorted(inclusive.items(), key=lambda kv: -kv[1])}
    return ModelProfile(model=name, device=device, forwards=forwards,
                        unit="device time" if cuda else "thread cpu time",
                        forward_ms=round(total / 1000, 4), spots=spots,
                        model_self=round(max(0.0, 1 - covered / total), 4), modules=modules,
                        every=every)


def top_ops(named: dict[str, float], count: int = 3) -> list[str]:
    total = sum(named.values()) or 1.0
    ranked = sorted(named.items(), key=lambda kv: -kv[1])[:count]
    return [f"{name} {t / total:.0%}" for name, t in ranked]


def lookthrough(inclusive: dict[str, float], children: dict[str, list[str]]) -> dict[str, float]:
    """Containers that are never called (ModuleList, ModuleDict) get their called children's
    time, so the frontier can descend through them."""
    out = dict(inclusive)

    def total(path):
        if path in out:
            return out[path]
        value = sum(total(c) for c in children.get(path, []))
        if value:
            out[path] = value
        return value

    for path in children:
        total(path)
    return out


def most_common(seen: list[Signature]) -> Signature | None:
    if not seen:
        return None
    counts: dict[tuple, int] = {}
    for s in seen:
        counts[s.key()] = counts.get(s.key(), 0) + 1
    best = max(counts, key=lambda key: counts[key])
    return next(s for s in seen if s.key() == best)


OTHER_SHAPES_MAX = 3  # configurations an extracted problem declares beside its most frequent one


def other_shapes(seen: list[Signature], common: Signature | None) -> list[list[dict]]:
    """The arguments of the next most frequent signatures that differ from `common` only in
    tensor shapes (same arguments, types and dtypes): the sizes the model really calls the spot
    with, which its extracted problem declares as input configurations."""
    if common is None:
        return []
    counts: dict[tuple, int] = {}
    first: dict[tuple, Signature] = {}
    for s in seen:
        counts[s.key()] = counts.get(s.key(), 0) + 1
        first.setdefault(s.key(), s)
    ordered = sorted((k for k in counts if k != common.key()), key=lambda k: -counts[k])
    return [first[k].args for k in ordered if _same_but_shapes(first[k], common)][:OTHER_SHAPES_MAX]


def _same_but_shapes(one: Signature, other: Signature) -> bool:
    if one.kwargs != other.kwargs or len(one.args) != len(other.args):
        return False
    return all({k: v for k, v in a.items() if k not in ("shape", "low", "high")}
               == {k: v for k, v in b.items() if k not in ("shape", "low", "high")}
               and ("shape" in a) == ("shape" in b) for a, b in zip(one.args, other.args))


def training_step(model, inputs):
    """One training step of the model, as the referee judges one (kernelbench/training.py):
    the floating-point inputs as leaves, the forward, the backward for a random upstream
    gradient drawn once, and the gradients cleared for the next step."""
    import torch

    leaves = [x.detach().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in inputs]
    upstream: list = []

    def run():
        outputs = model(*leaves)
        outputs = [o for o in (outputs if isinstance(outputs, (tuple, list)) else (outputs,))
                   if isinstance(o, torch.Tensor) and o.requires_grad]
        if not outputs:
            raise RuntimeError("no output of the model requires grad: there is no backward pass to profile")
        if not upstream:
            upstream.extend(torch.randn_like(o) for o in outputs)
        torch.autograd.backward(outputs, upstream)
        for tensor in [*leaves, *model.parameters()]:
            if isinstance(tensor, torch.Tensor):
                tensor.grad = None

    return run


def attribute_training(events, cuda: bool) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Like `attribute`, over whole training steps: a forward op's time goes to the innermost
    module range around it; a backward op's to the module whose forward op made its autograd
    node (the same sequence number); what belongs to no module (gradient accumulation) to the
    model alone. Each step is one profiled STEP range, by time (on a GPU the backward runs on
    the autograd engine's own thread, outside the step's range)."""
    from torch.autograd import DeviceType

    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    steps = sorted((e.time_range.start, e.time_range.end) for e in cpu if e.name.startswith(STEP))
    made_by: dict[int, str] = {}
    for event in cpu:
        range_node = _innermost(event, RANGE)
        if event.sequence_nr >= 0 and range_node is not None and not event.name.startswith(BACKWARD):
            made_by.setdefault(event.sequence_nr, range_node.name[len(RANGE):])
    per_step: dict[int, dict[str, float]] = {}
    ops: dict[str, dict[str, float]] = {}
    for event in cpu:
        own = (getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)) \
            if cuda else event.self_cpu_time_total
        step = next((i for i, (start, end) in enumerate(steps) if start <= event.time_range.start <= end), None)
        if not own or step is None:
            continue
        range_node, node = _innermost(event, RANGE), _innermost(event, BACKWARD)
        path = range_node.name[len(RANGE):] if range_node is not None else \
            made_by.get(node.sequence_nr, ROOT) if node is not None else ROOT
        totals = per_step.setdefault(step, {})
        named = ops.setdefault(path, {})
        named[event.name] = named.get(event.name, 0.0) + own
        while True:   # the module and every module around it
            totals[path] = totals.get(path, 0.0) + own
            if path == ROOT:
                break
            path = path.rpartition(".")[0]
    return fastest(list(per_step.values())), ops


def _innermost(event, prefix: str):
    """The event itself or its nearest enclosing event whose name starts with `prefix`."""
    node = event
    while node is not None and not node.name.startswith(prefix):
        node = node.cpu_parent
    return node

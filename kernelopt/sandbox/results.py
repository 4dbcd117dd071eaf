"""What goes into an evaluation and what comes out: `EvalOptions` and `EvalResult`; and what
judges: `Judge`.

These are the referee's public contract: `kernelopt eval --json` prints an `EvalResult`, the run
store records it, rewards are computed from it. Add fields; do not rename or remove them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Literal, Protocol, get_args

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from kernelopt.sandbox.hardware import Hardware

Status = Literal["correct", "incorrect", "compile_error", "runtime_error", "timeout", "rejected"]
IsolationChoice = Literal["auto", "bubblewrap", "unshare", "none", "docker"]
# What a verdict can flag: the hack families the referee recognises (docs/referee.md's table)
# and the reduced-precision / unused-kernel notes. The one list; FLAGS is its runtime form.
# timing_inconsistent and harness_object_not_plain are no longer raised (the host
# clocks and reads every call itself: docs/referee.md, "Retired rules"); they stay so that
# results stored before can be read.
Flag = Literal[
    "patched_runtime", "python_threads", "native_threads", "child_processes", "output_not_plain_tensor",
    "output_aliases_input", "input_mutation", "inputs_differ", "inconsistent_outputs", "reduced_precision",
    "memory_limit", "custom_kernel_unused", "timing_inconsistent", "output_ignores_input", "protocol_violation",
    "harness_object_not_plain", "violation", "uncontained", "faster_than_physics",
]
RETIRED_FLAGS: frozenset[str] = frozenset({"timing_inconsistent", "harness_object_not_plain"})
FLAGS: frozenset[str] = frozenset(get_args(Flag)) - RETIRED_FLAGS


class EvalOptions(BaseModel):
    """Settings of one evaluation. Defaults follow KernelBench where it has one."""

    device: str = Field(
        "auto", description="cpu, cuda, cuda:N, or auto: cuda:0 when torch sees a GPU, else cpu")
    timeout: float = Field(300.0, gt=0, description="wall-clock limit of the whole evaluation in seconds")
    memory_limit: int | None = Field(
        None, gt=0, description="resident memory per worker in bytes, or on the command line a size such as "
                                "8G; default: 3/8 of the host's RAM (two workers and the host fit)"
    )
    correctness_trials: int = Field(5, ge=1, le=100, description="input sets on which the outputs are compared")
    atol: float = Field(1e-2, ge=0, description="absolute tolerance of the output comparison")
    rtol: float = Field(1e-2, ge=0, description="relative tolerance of the output comparison")
    max_rel_error: float | None = Field(
        None, gt=0, description="bound on ||out-ref||/||ref||; default: max(rtol, 1e-3)"
    )
    precision_policy: Literal["flag", "reject"] = Field(
        "flag", description="when the error shows reduced-precision arithmetic: flag it in the verdict, or "
                            "reject the candidate"
    )
    isolation: IsolationChoice = Field(
        "auto", description="sandbox backend: auto is the strongest namespace backend that works here "
                            "(bubblewrap, unshare, none); docker runs a container of the image per worker, "
                            "see docs/sandbox.md")
    image: str = Field("kernelopt-sandbox", description="the docker backend's sandbox image, built from the "
                                                        "Dockerfile")
    seed: int | None = Field(None, description="fix the trial seeds; default: secret and random")
    element_checks: int = Field(
        4, ge=0, le=16, description="answered input sets re-run with part of each input's elements changed, "
                                    "to check that the output follows every element (0: off); see docs/referee.md")
    # Timing (see DESIGN.md, timing methodology).
    warmup_calls: int = Field(3, ge=1)
    min_timed_calls: int = Field(10, ge=3)
    max_timed_calls: int = Field(200, ge=3)
    target_rel_spread: float = Field(
        0.05, gt=0, description="unused since timing stops on the speedup's precision; kept so old requests parse")
    target_precision: float = Field(
        0.05, gt=0, description="stop timing once the speedup's 95 % confidence interval is within +- this; "
                                "the timing budget still caps it")
    timing_budget: float = Field(10.0, gt=0, description="seconds spent timing at most")
    outlier_speedup: float = Field(10.0, gt=1, description="re-measure speedups above this")
    pin_timing: Literal["auto", "on", "off"] = Field(
        "auto", description="run both workers' timed calls of a round on one CPU core, the core "
        "changing between rounds; auto: on; off leaves placement to the OS; see docs/referee.md")
    keep_scratch: bool = False
    # Extension builds (see builds.py): the host builds what the candidate passes to
    # load_inline/load and caches it; "off" lets the candidate build in its own sandbox.
    build_mode: Literal["fast", "exact", "stock", "off"] = Field(
        "fast", description="how load_inline/load extensions are built: by the host, cached (fast, exact, "
                            "stock), or in the candidate's sandbox (off); see docs/builds.md"
    )
    build_cache: str | None = Field(None, description="build cache directory (default: $KERNELOPT_BUILD_CACHE "
                                                      "or ~/.cache/kernelopt/builds)")
    # Profile-guided feedback (sandbox/profiling.py): advisory, never part of the verdict.
    profile: bool = Field(False, description="after a correct verdict, profile both sides once outside the timed "
                                             "calls (time share per kernel or op, roofline); advisory, see "
                                             "docs/referee.md")

    training_pass: Literal["auto", "forward", "backward", "both"] = Field(
        "auto", description="what is judged: the forward pass (KernelBench's), the training step (forward and "
                            "backward: outputs and gradients, timed together), or both; auto: the problem's "
                            "PASS, else forward (docs/training.md)")
    shapes: str = Field(
        "all", description="which of the problem's declared input configurations (SHAPES, HELD_OUT_SHAPES) are "
                           "judged: all, shown, held-out, or positions such as 1,3; a plain problem has one "
                           "(docs/problems.md)")

    def effective_max_rel_error(self) -> float:
        return self.max_rel_error if self.max_rel_error is not None else max(self.rtol, 1e-3)


class TrialResult(BaseModel):
    """One correctness trial: an input set, both outputs, their comparison."""

    index: int
    seed: int
    passed: bool
    message: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    rel_l2_error: float | None = None
    mismatch_fraction: float | None = None


class TimingStats(BaseModel):
    """Per-call times of one side, in milliseconds."""

    samples: int
    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    p25_ms: float
    p75_ms: float
    rel_iqr: float = Field(description="(p75 - p25) / median")
    median_precision: float | None = Field(
        None, description="half the 95 % confidence interval of the median, relative to it")


class HeadToHead(BaseModel):
    """The search's leader, judged again between a challenger's two readings (agent/selection.py)."""

    index: int = Field(description="the leader's attempt")
    code_hash: str = Field(description="the leader's code (sha256)")
    speedup: float | None = Field(
        description="the leader's fresh reading, beside the challenger's; None where it was not judged correct again")


class Timing(BaseModel):
    method: str
    reference: TimingStats
    candidate: TimingStats
    rounds: int
    calls_per_round: int
    reference_ms: float = Field(description="the reference's mean time per timed call (the speedup's numerator)")
    candidate_ms: float = Field(description="the candidate's mean time per timed call (the speedup's denominator)")
    wall_speedup: float | None = Field(
        None, description="the speedup by the host's wall clock over the calls' windows (where the CPU time decides, "
                          "for comparison)")
    reference_charge_ms: float = Field(
        0.0, description="0 or negative: what capping the reference's disturbed rounds took off its mean "
                         "(noise may only lower a speedup)")
    speedup_precision: float | None = Field(
        None, description="half the 95 % confidence interval of the speedup, relative to it: the rounds' "
                          "variation (order, buffers, core and allocations change between rounds) and the "
                          "spread between fresh worker processes, in quadrature")
    remeasured: bool = False
    speedups_measured: list[float] = Field(default_factory=list)
    device_probe_ms: dict[str, dict[str, float]] | None = Field(
        None, description="with device slots: the keeper's idle probe just before each side's timed windows "
                          "(a short kernel of its own; median and max, ms), long where another context held the "
                          "device while that side was frozen; reported, not yet judged")
    incumbent: HeadToHead | None = Field(
        None, description="a search's challenger only: the leader it was measured against, head to head")
    # The physical floor (sandbox/physics.py; docs/referee.md, "The physical floor").
    floor_ms: float | None = Field(
        None, description="no call can take less: the bytes one call must move (inputs read once, outputs written "
                          "once) at the device's fastest memory; None where no ceiling is known or the reference "
                          "ran below it (floor_note)")
    floor_bytes: int | None = Field(None, description="the bytes the floor rests on")
    floor_bandwidth_gbs: float | None = Field(None, description="the ceiling bandwidth the floor rests on, GB/s")
    floor_source: str | None = Field(
        None, description="where the ceiling comes from: measured (once per machine, cached), datasheet (a known "
                          "GPU) or override ($KERNELOPT_CEILING_BANDWIDTH)")
    floor_basis: str | None = Field(None, description="what the floor rests on, in words")
    floor_note: str | None = Field(None, description="why no floor is used (the reference measured below it)")
    reference_sol: float | None = Field(
        None, description="the reference's fraction of speed of light: floor_ms / reference_ms (1.0: at the floor)")
    candidate_sol: float | None = Field(
        None, description="the candidate's fraction of speed of light: floor_ms / candidate_ms")

    @property
    def speedup(self) -> float:
        """The verdict's speedup: the reference's mean time per call over the candidate's."""
        return self.reference_ms / self.candidate_ms


class Check(BaseModel):
    """One invariant the referee checked, and what it found."""

    name: str
    passed: bool
    detail: str = ""


class Isolation(BaseModel):
    backend: str
    network_isolated: bool
    filesystem_confined: bool
    pid_namespace: bool
    environment_scrubbed: bool = True
    memory_limit_bytes: int
    memory_limit_mechanism: str
    containment: str = Field(
        "", description="what held every process and thread of the candidate's worker: cgroup2, cgroup1 (a "
                        "kernel-enforced group: frozen, charged and killed whole), docker (the container's "
                        "cgroup), or none (the host walked the process tree; the verdict is flagged uncontained)")
    containment_detail: str = Field("", description="the mechanism, and why no stronger one is used here")
    wakeup_sources_denied: bool = Field(
        False, description="the candidate's worker could make nothing the kernel wakes by itself while it is frozen "
                           "(a seccomp filter refused timers, sockets other than AF_UNIX and asynchronous I/O), so no "
                           "work of its objects ran, and was charged, in the reference's turns")
    warnings: list[str] = Field(default_factory=list)


class Environment(BaseModel):
    device: str
    device_name: str | None = None
    python: str
    torch: str
    cuda: str | None = None
    driver: str | None = None
    platform: str
    allocator: str | None = None  # the workers' malloc: "jemalloc" or "glibc"


class BuildRecord(BaseModel):
    """One extension build the candidate asked for."""

    name: str
    key: str
    ok: bool
    cached: bool = Field(description="found in the build cache (no compile)")
    mode: str
    lean: bool = Field(False, description="a CUDA source compiled with torch/types.h for torch/extension.h")
    build_seconds: float = Field(description="compile time when it was built")
    wait_seconds: float = Field(description="time this evaluation waited for it")


class ProfileRow(BaseModel):
    """One kernel (GPU) or op (CPU) of a side's profile, per forward call."""

    name: str
    share: float = Field(description="fraction of the side's profiled time")
    calls: float = Field(description="launches (GPU) or calls (CPU) per forward")
    ms: float = Field(description="time per forward")
    metrics: dict[str, float] = Field(
        default_factory=dict, description="Nsight Compute, % of peak: dram, sm, occupancy (achieved)")


class SideProfile(BaseModel):
    """Where one side's time goes (torch.profiler), and how close it comes to the roofline."""

    unit: Literal["kernel", "op"] = Field(description="GPU kernels, or CPU ops by self time")
    total_ms: float = Field(description="profiled time per forward (kernel time on a GPU, op self time on a CPU)")
    iterations: int
    rows: list[ProfileRow] = Field(default_factory=list, description="the largest shares, then 'other'")
    measured_ms: float | None = Field(None, description="the verdict's mean time per call for this side")
    speed_of_light: float | None = Field(
        None, description="the roofline's lower bound on the time / measured_ms (1.0: at the device's peak)")
    gflops: float | None = Field(None, description="achieved GFLOP/s at measured_ms")
    gbytes: float | None = Field(None, description="achieved GB/s at measured_ms (of the bytes' lower bound)")


class Roofline(BaseModel):
    """The problem's work against the device's peaks, both counted in the reference worker."""

    flops: int | None = Field(None, description="torch.utils.flop_counter on the reference (matmuls, convs, "
                                                "attention; elementwise ops count 0)")
    bytes: int = Field(description="inputs, outputs and weights of one call, each once: a lower bound on the "
                                   "bytes moved")
    precision: str | None = None
    peak_tflops: float | None = None
    peak_tbs: float | None = Field(None, description="memory bandwidth, TB/s")
    bound_ms: float | None = Field(None, description="max(flops / peak, bytes / bandwidth): no call can be faster")


class Profile(BaseModel):
    """Profile-guided feedback: advisory, computed after the verdict; no status, speedup or
    reward comes from it. The candidate's side runs in the candidate's own process."""

    device: str
    reference: SideProfile | None = None
    candidate: SideProfile | None = None
    roofline: Roofline | None = None
    notes: list[str] = Field(default_factory=list, description="what could not be profiled, and why")
    seconds: float = Field(0.0, description="wall time of the profiling pass")


class PassSpeedup(BaseModel):
    """One pass of a training problem: its speedup and each side's time per call."""

    speedup: float | None = None
    reference_ms: float | None = None
    candidate_ms: float | None = None
    speedup_precision: float | None = Field(None, description="half the 95 % interval, relative (none for the "
                                                              "backward: a difference of two measurements)")


class Passes(BaseModel):
    """A training problem's passes (--pass backward or both; docs/training.md)."""

    forward: PassSpeedup | None = Field(None, description="the forward alone (--pass both)")
    backward: PassSpeedup | None = Field(None, description="each side's step time less its forward time "
                                                           "(--pass both)")
    step: PassSpeedup = Field(description="forward and backward, as one training step: the verdict's speedup")


class ShapeVerdict(BaseModel):
    """One input configuration's part of a verdict (a problem with SHAPES)."""

    name: str = Field(description="the constants it sets, e.g. 'batch_size=128 dim=4096'; 'default' for the "
                                  "file's own")
    held_out: bool = Field(False, description="judged but never shown in a prompt")
    status: Status
    message: str = ""
    speedup: float | None = None
    speedup_precision: float | None = Field(None, description="half the 95 % interval, relative to the speedup")
    reference_ms: float | None = None
    candidate_ms: float | None = None


class EvalResult(BaseModel):
    """The referee's verdict on one candidate."""

    status: Status
    correct: bool
    speedup: float | None = None
    reference_ms: float | None = None
    candidate_ms: float | None = None
    message: str = ""
    problem_name: str | None = None
    problem_hash: str | None = None
    candidate_hash: str | None = None
    trials: list[TrialResult] = Field(default_factory=list)
    timing: Timing | None = None
    checks: list[Check] = Field(default_factory=list)
    flags: list[Flag] = Field(
        default_factory=list, description="suspicious behaviour found (hack families)"
    )
    rules: list[str] = Field(
        default_factory=list, description="the referee's rules that decided or flagged this verdict, by name "
                                          "(kernelopt/sandbox/rules/; docs/referee.md, 'The rules')")
    optimization_kinds: list[str] = Field(default_factory=list)
    isolation: Isolation | None = None
    environment: Environment | None = None
    compile_log: str = ""
    candidate_output: str = Field("", description="tail of what the candidate printed")
    warnings: list[str] = Field(default_factory=list)
    durations: dict[str, float] = Field(default_factory=dict)
    builds: list[BuildRecord] = Field(default_factory=list, description="extension builds the host made or "
                                                                        "found in its cache")
    profile: Profile | None = Field(None, description="with --profile, after a correct verdict: where the time "
                                                      "goes (advisory, not part of the verdict)")
    passes: Passes | None = Field(
        None, description="for a training problem (--pass backward or both): the forward's, backward's and "
                          "training step's speedups; the verdict's speedup is the step's (docs/training.md)")
    shapes: list[ShapeVerdict] | None = Field(
        None, description="for a problem that declares several input configurations: each one's verdict; the "
                          "speedup is then their geometric mean (docs/problems.md)")

    def summary(self) -> str:
        """A short human-readable verdict."""
        line = f"{self.status}"
        if self.speedup is not None:
            line += (
                f"  speedup {self.speedup:.3f}x  "
                f"(reference {self.reference_ms:.4f} ms, candidate {self.candidate_ms:.4f} ms)"
            )
        parts = [line]
        if self.message:
            parts.append(self.message)
        for shape in self.shapes or []:
            held = " (held out)" if shape.held_out else ""
            reading = (f"speedup {shape.speedup:.3f}x" + (f" +-{shape.speedup_precision:.1%}"
                                                          if shape.speedup_precision is not None else "")
                       if shape.speedup is not None else shape.status)
            parts.append(f"  [{shape.name}]{held}: {reading}")
        if self.optimization_kinds:
            parts.append("kind: " + ", ".join(self.optimization_kinds))
        if self.flags:
            parts.append("flags: " + ", ".join(self.flags))
        if self.isolation is not None:
            held = f", containment: {self.isolation.containment}" if self.isolation.containment else ""
            parts.append(f"isolation: {self.isolation.backend}{held}")
            parts.extend(f"warning: {w}" for w in self.isolation.warnings)
        parts.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(parts)


class Judge(Protocol):
    """What judges the candidates of one problem under one option set: a local
    `sandbox.batch.Evaluator`, or `cluster.pool.RemoteEvaluator` on a Ray cluster's actors. The
    reward service's lanes, the bench and the attempt pipeline take one of these."""

    def evaluate(self, source: str) -> EvalResult:
        """The verdict of one candidate (the source of a file defining ModelNew)."""
        ...

    def evaluate_many(self, sources: Iterable[str], jobs: int | None = None) -> Iterator[tuple[int, EvalResult]]:
        """(index in `sources`, verdict) for each candidate, in the order verdicts are reached."""
        ...

    def health(self) -> dict:
        """The reference's health (sandbox/problem_health.py's `Health.as_dict()`)."""
        ...

    @property
    def device_model(self) -> str | None:
        """The model of the device the verdicts are (or were last) measured on."""
        ...

    @property
    def hardware(self) -> Hardware:
        """The device the candidates are timed on, as the prompt describes it."""
        ...

    def close(self, at_once: bool = False) -> None:
        """Release what the judge holds: a local one's workers (it judges nothing after; at once:
        killed without being asked to quit, on an interrupt); a remote one leaves its actor's
        Evaluator warm."""
        ...


def merged_labels(results: list[EvalResult]) -> tuple[list[Flag], list[str]]:
    """The flags and the rules of verdicts judged in parts (configurations, passes), each once,
    in the order they first appear."""
    flags = list(dict.fromkeys(flag for r in results for flag in r.flags))
    rules = list(dict.fromkeys(rule for r in results for rule in r.rules))
    return flags, rules

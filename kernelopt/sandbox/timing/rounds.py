"""The timed rounds: interleaved turns of the two workers on one core, every call a window the
host clocks and reads itself (calls.py), every call's outputs compared in full with the
reference's, until the stop rule (stop.py) says enough; then the speedup from each side's means
(means.py) and its interval (stats.py). The verdicts come from the rules (sandbox/rules/).
"""

from __future__ import annotations

import contextlib
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kernelopt.sandbox import census, compare, correctness, rules
from kernelopt.sandbox.calls import Call, keeper_step, kept_outputs, run_call
from kernelopt.sandbox.compare import Tolerances
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.device_slots import OnDevice
from kernelopt.sandbox.every_element import Kept
from kernelopt.sandbox.physics import Floor
from kernelopt.sandbox.input_files import PLACEMENT_WINDOW_BYTES
from kernelopt.sandbox.process import WorkerProcess
from kernelopt.sandbox.records import InputSet, Round, SideRound
from kernelopt.sandbox.results import Check, EvalOptions, Timing
from kernelopt.sandbox.timing import means, stats
from kernelopt.sandbox.timing.stop import StopRule
from kernelopt.sandbox.worker import commands

ROUND_TARGET_S = 0.05  # aim for rounds of about this long, so interleaving stays fine-grained
ROUND_WALL_TARGET_S = 0.15  # ... and for this much host time per worker and round, all included
MAX_CALLS_PER_ROUND = 50


@dataclass
class Timer:
    """What the timing phase works with (passed in, not shared): the conversation, the
    evaluation's settings, the candidate's secret random stream (inputs, placement), the cores
    the calls run on, the size of one call, the census, the findings, how outputs reach the
    host (calls.transport_for); and the input-dependence test the timed calls feed (the same
    test as the trials'), judged once timing is done; fed only where the trials found a
    degenerate output (`judge_dependence`), as elsewhere it cannot fail and would cost every
    call a pass over the output."""

    conversation: Conversation
    options: EvalOptions
    device: str
    chooser: random.Random
    cpus: list[int] | None
    bytes_per_call: int
    census: Callable[[], None]
    findings: rules.Findings
    transport: str
    judge_dependence: bool = True
    kept: Kept | None = None  # answered calls for the every-element check (every_element.py)
    floor: Floor | None = None  # the physical floor of one call (physics.py), where a ceiling is known
    compared: int = 0  # timed calls compared in full (all of them)
    compared_on_device: int = 0  # ... of which by the keeper, on the device (device slots)
    reduced_precision_calls: int = 0  # ... whose error level showed arithmetic below the reference's precision
    last_inputs: InputSet | None = None  # the last round's last set, for the next round's untimed first call
    dependence: compare.InputDependence = field(init=False)

    def __post_init__(self) -> None:
        self.dependence = compare.InputDependence(self.options)

    @property
    def compares_on_device(self) -> bool:
        """Whether timed outputs stay on the device, compared there by the keeper: with device
        slots, unless the input-dependence test needs every output on the host."""
        return self.transport == commands.DEVICE and not self.judge_dependence


# A single call's error level can stray above the reduced-precision bound (an input set that
# makes a reduction cancel), but arithmetic below the reference's precision shows on nearly every
# call: the timed calls show it when more than this share of them do. A program that saves this
# way on fewer calls saves at most this share of what the downgrade would.
REDUCED_PRECISION_SHARE = 0.25


def measure(timer: Timer, checks: list[Check]) -> Timing:
    """The timing phase, again once when the speedup is an outlier or the candidate's time is
    below the physical floor (the lower speedup is kept; a time below the floor in both is
    rejected). Its checks go to `checks` as they are made (a rejection keeps them)."""
    phases = [timing_phase(timer, checks)]
    floor, note = usable_floor(timer.floor, phases)
    if phases[0].speedup > timer.options.outlier_speedup or (floor is not None
                                                              and floor.impossible(phases[0].candidate_ms)):
        phases.append(timing_phase(timer, checks))
        floor, note = usable_floor(timer.floor, phases)
    result = min(phases, key=lambda p: p.speedup)
    result.remeasured = len(phases) > 1
    result.speedups_measured = [round(p.speedup, 6) for p in phases]
    with_floor(result, floor, note)
    # Every timed call is a check: its outputs are compared in full, and judged for input
    # dependence like the trials, so a candidate that computes while it believes itself checked
    # and guesses a degenerate output while timed fails here.
    ignored = timer.dependence.verdict()
    checks.append(Check(name="timed_output_follows_input", passed=ignored is None, detail=ignored or ""))
    rules.enforce(rules.timed_output_ignores_input(ignored))
    # The precision policy judges the timed calls too: a program that computes in full precision
    # while it is checked (the trials, known by their count) and in bfloat16 when timed would
    # otherwise buy its speed with the arithmetic the policy forbids.
    reduced = timer.reduced_precision_calls > REDUCED_PRECISION_SHARE * timer.compared
    rules.enforce(rules.reduced_precision(reduced, timer.options.precision_policy), timer.findings)
    # A time below the floor is measured twice before it is believed, and then it is not.
    impossible = rules.faster_than_physics(max(p.candidate_ms for p in phases), floor, 2) if len(phases) == 2 else None
    checks.append(Check(name="above_physical_floor", passed=impossible is None,
                        detail=impossible.message if impossible else f"floor {floor.ms:.4g} ms: {floor.basis()}"
                        if floor else note or "no ceiling known"))
    rules.enforce(impossible)
    return result


def usable_floor(floor: Floor | None, phases: list[Timing]) -> tuple[Floor | None, str | None]:
    """The floor, unless the trusted reference measured below it in a timing phase: then the
    floor is wrong (a ceiling too low for this machine), never the candidate's fault, and none
    is used; the note says why."""
    if floor is None:
        return None, None
    below = [p.reference_ms for p in phases if p.reference_ms < floor.ms]
    if not below:
        return floor, None
    return None, (f"the reference measured {min(below):.4g} ms per call, below the physical floor of "
                  f"{floor.ms:.4g} ms ({floor.basis()}): the ceiling is too low for this machine, so no floor "
                  "is used (set $KERNELOPT_CEILING_BANDWIDTH, or delete the cached measurement)")


def with_floor(timing: Timing, floor: Floor | None, note: str | None) -> None:
    """The verdict's floor and each side's fraction of speed of light, or why there is none."""
    timing.floor_note = note
    if floor is None:
        return
    timing.floor_ms, timing.floor_bytes = floor.ms, floor.bytes
    timing.floor_bandwidth_gbs, timing.floor_source = floor.ceiling.bandwidth_gbs, floor.ceiling.source
    timing.floor_basis = floor.basis()
    timing.reference_sol, timing.candidate_sol = floor.sol(timing.reference_ms), floor.sol(timing.candidate_ms)


def timing_phase(timer: Timer, checks: list[Check]) -> Timing:
    """Interleaved rounds until the speedup is known precisely enough, the call cap or the time
    budget."""
    options = timer.options
    begin = time.monotonic()
    # The host keeps both sides' outputs of a round until it compares them, so no round, the
    # warm-up included, takes more calls than fit ROUND_BYTES (KernelBench's
    # 81_conv_transposed_2D at v0.1 has 0.83 GB outputs).
    fitting = max(1, correctness.ROUND_BYTES // timer.bytes_per_call)
    warmup = min(options.warmup_calls, fitting)
    warm = timed_round(timer, warmup, 0)
    harness_s = (time.monotonic() - begin) / (2 * warmup)  # per call, all included
    slowest_s = max(statistics.fmean(side.ms) for side in warm) / 1e3
    per_round = max(1, min(MAX_CALLS_PER_ROUND, int(ROUND_TARGET_S / max(slowest_s, 1e-6)),
                           int(ROUND_WALL_TARGET_S / max(harness_s, 1e-6)),
                           fitting))
    # One discarded round of the measured size: allocator and caches reach the state the
    # measured rounds will see (the first round of a fresh process is often much slower).
    timed_round(timer, per_round, 1)
    round_s = per_round * harness_s * 2
    rounds = measured_rounds(timer, per_round, round_s)
    return timing_result(rounds, per_round, timer.device, timer.bytes_per_call, timer.transport,
                         timer.compared_on_device > 0)


def timing_result(rounds: list[Round], per_round: int, device: str, bytes_per_call: int,
                  transport: str = commands.FRAME, compared_on_device: bool = False) -> Timing:
    """The speedup from each side's total time over all timed calls (its mean per call), never
    from a statistic one call can move; its interval from the rounds and the spread between
    worker processes (stats.calibrated_precision)."""
    cand = [c for c, _ in rounds]
    ref = [r for _, r in rounds]
    cand_means, ref_means = means.side_means(cand, ref)
    excess = means.blocked_excess(cand, ref)
    cand_stats = stats.summarize([ms for side in cand for ms in means.candidate_call_ms(side, excess)])
    ref_stats = stats.summarize([ms for side in ref for ms in side.ms])
    cand_ms, ref_ms = statistics.fmean(cand_means), statistics.fmean(ref_means)
    wall_c = statistics.fmean(ms for side in cand for ms in side.wall_ms)
    wall_r = statistics.fmean(ms for side in ref for ms in side.wall_ms)
    return Timing(method=clock_method(device, cand, transport, compared_on_device), reference=ref_stats, candidate=cand_stats, rounds=len(rounds),
                  calls_per_round=per_round, reference_ms=ref_ms, candidate_ms=cand_ms,
                  wall_speedup=wall_r / wall_c if wall_c > 0 else None,
                  speedup_precision=stats.calibrated_precision(stats.ratio_precision(ref_means, cand_means), device,
                                                               bytes_per_call, min(cand_ms, ref_ms)),
                  reference_charge_ms=ref_ms - ref_stats.mean_ms,
                  device_probe_ms=device_probes(cand, ref))


def device_probes(cand: list[SideRound], ref: list[SideRound]) -> dict[str, dict[str, float]] | None:
    """The keeper's idle probes before each side's timed windows (median and largest, ms), or
    None where there were none (no device slots)."""
    found = {}
    for side, rounds in (("candidate", cand), ("reference", ref)):
        probes = [ms for r in rounds for ms in r.device_probe_ms]
        if probes:
            found[side] = {"median": round(statistics.median(probes), 4), "max": round(max(probes), 4)}
    return found or None


_TRANSPORTS = {
    commands.DEVICE: "; inputs placed in device slots and outputs taken from them by a trusted keeper while the "
                     "worker is frozen, the window ending when the keeper has read a secret sample of them",
    commands.MEMORY: "; outputs read from the frozen worker's memory",
    commands.FRAME: "; outputs sent in the worker's answer, inside the window on both sides",
}


def clock_method(device: str, cand: list[SideRound], transport: str = commands.FRAME,
                 compared_on_device: bool = False) -> str:
    """Which of the host's clocks decided and how a call's data travelled, in words (the same
    for both sides)."""
    cpu = means.cpu_time_decided(cand)
    clock = ("the worker group's CPU time over each call's window (kernel accounting, read by the host while "
             "the group is frozen), plus the time the candidate's calls spent blocked beyond the reference's"
             if cpu else "the host's wall clock over each call's window")
    sync = "; device-wide synchronize before each answer" if device.startswith("cuda") else ""
    compared = "; the timed outputs compared with the reference's by the keeper, on the device" if compared_on_device else ""
    capped = "disturbed reference rounds capped" if cpu else \
        "disturbed rounds capped on both sides (the candidate's no lower than its median round)"
    return clock + sync + _TRANSPORTS.get(transport, "") + compared + \
        "; the same harness loop on both sides, nothing allowed or charged; " + capped


def measured_rounds(timer: Timer, per_round: int, round_s: float) -> list[Round]:
    """Measured rounds (each expected to take `round_s`) until the stop rule: each round's
    (candidate, reference) calls."""
    options = timer.options
    stop = StopRule(min_calls=options.min_timed_calls, max_calls=options.max_timed_calls,
                    target_precision=options.target_precision, budget_end=time.monotonic() + options.timing_budget,
                    deadline=timer.conversation.deadline, round_s=round_s, device=timer.device)
    rounds: list[Round] = []
    while True:
        # Alternate which worker goes first, and the core both run their calls on.
        rounds.append(timed_round(timer, per_round, len(rounds)))
        if stop.done(rounds, time.monotonic()):
            return rounds


def timed_round(timer: Timer, calls: int, number: int) -> Round:
    """One round of `calls` timed calls per side: each worker takes them in turn (the candidate
    first in even rounds, the reference in odd ones), every call its own window on the host's
    clocks (calls.run_call), the other worker frozen throughout. Each side's turn begins with
    one more call, on inputs of its own, that is compared but not timed: after the other
    worker's turn a process's caches are cold, and how fast each warms up is a trait of the
    process that would otherwise tilt every round the same way. That call takes the previous
    round's last set again (both sides answered it): it is not timed, so an answer remembered
    from before gains nothing, and where making a set costs more than the call (a 134 MB set:
    about 0.3 s of the reference's time, rounds of one timed call) a round needs one set, not
    two. Every timed call's set is new. Then every call's outputs are compared in full with the
    reference's on the same inputs. Returns the (candidate, reference) sides."""
    conversation = timer.conversation
    candidate, reference = conversation.candidate, conversation.reference
    again = timer.last_inputs
    fresh = conversation.make_inputs([timer.chooser.randrange(1, 2**31 - 1) for _ in range(calls + (again is None))])
    inputs = ([again] if again is not None else []) + fresh
    pin = timing_cpu(timer.cpus, number)
    at = placement(inputs, timer.chooser)
    first, second = (candidate, reference) if number % 2 == 0 else (reference, candidate)
    # Calls kept for the every-element check are chosen now: their outputs come to the host
    # (a set answered before is not offered twice).
    kept_places = [timer.kept.reserve() if timer.kept is not None and input_set is not again
                   else None for input_set in inputs]
    checked = inputs_checked(kept_places, timer.chooser)
    if timer.compares_on_device:
        _forget_kept_outputs(reference)
    taken: dict[WorkerProcess, list[Call]] = {}
    for worker in (first, second):
        with prompt_host():
            taken[worker] = [
                run_call(conversation, worker, input_set, transport=timer.transport, at=at, pin_cpu=pin,
                         device=timer.device, check_inputs=checked[index],
                         on_device=_on_device(timer, index, taken.get(first), "candidate" if first is candidate
                                              else "reference") if kept_places[index] is None else None)
                for index, input_set in enumerate(inputs)]
        if worker is candidate:
            # As the candidate's turn ends: a process its calls left running could slow the
            # reference's turn on the shared core; to do so it must be alive now.
            timer.census()
    compare_round(timer, taken[candidate], taken[reference], repeated_first=again is not None)
    timer.last_inputs = inputs[-1]
    if timer.kept is not None:
        for place, input_set, c, r in zip(kept_places, inputs, taken[candidate], taken[reference]):
            if place is not None:
                timer.kept.put(place, input_set, c, r)
    sides = {worker: side_round(taken[worker][1:]) for worker in (candidate, reference)}
    census.parallelism(sides[candidate], sides[reference], timer.device, timer.findings)
    return sides[candidate], sides[reference]


# The share of timed calls, drawn in secret, after which the host also checks the input slot (a
# pass over the call's inputs, outside the window), besides every call kept for the
# every-element check. A program that writes into its inputs on every timed call escapes n of
# them with probability 7/8 to the n (under 1 % past 35 calls; the first kept calls, always
# checked, catch one that starts at once); one that does so on a few calls gains little.
INPUT_CHECK_SHARE = 0.125


def inputs_checked(kept_places: list[int | None], chooser: random.Random) -> list[bool]:
    """Which of a round's calls have their inputs checked after the call (both sides): those
    kept for the every-element check, and a secret share of the rest."""
    return [place is not None or chooser.random() < INPUT_CHECK_SHARE for place in kept_places]


def _on_device(timer: Timer, index: int, first_calls: list[Call] | None, first_side: str) -> OnDevice | None:
    """What the keeper does with call `index`'s outputs (None: they come to the host): the
    first side's are kept; the second side's are compared with them, where they were kept."""
    if not timer.compares_on_device:
        return None
    if first_calls is None:
        return OnDevice(keep=str(index))
    first = first_calls[index]
    if first.kept is None:
        return None  # the first side's outputs came in its answer, so these come to the host too
    return OnDevice(compare_with=first.kept, kept_side=first_side,
                    kept_layouts=tuple((list(m[0]), m[1]) for m in first.record.meta),
                    tolerances=Tolerances.of(timer.options).to_json())


def _forget_kept_outputs(worker: WorkerProcess) -> None:
    """A round starts with nothing kept (a failed call's leftovers go)."""
    if worker.slots is not None:
        keeper_step(worker.slots.keeper.forget)


def compare_round(timer: Timer, cand: list[Call], ref: list[Call], repeated_first: bool = False) -> None:
    """Every call of the round, the untimed first included: its invariants (its inputs unchanged,
    where they were checked), and its outputs in full against the reference's on the same
    inputs (by the keeper, on the device, where both stayed there). A first call on a set
    answered before does not feed the input-dependence test again."""
    conversation = timer.conversation
    for index, (c, r) in enumerate(zip(cand, ref)):
        rules.enforce(rules.call_invariants(c.record, r.record))
        comparison = c.comparison or r.comparison
        if comparison is None:
            comparison = compare.compare_outputs(_on_host(conversation.candidate, c),
                                                 _on_host(conversation.reference, r), timer.options)
        else:
            timer.compared_on_device += 1
        rules.enforce(rules.timed_output_mismatch(comparison))
        timer.compared += 1
        timer.reduced_precision_calls += comparison.reduced_precision
        if timer.judge_dependence and not (repeated_first and index == 0):
            timer.dependence.add(c.outputs, r.outputs)


def _on_host(worker: WorkerProcess, call: Call) -> list:
    """A call's outputs on the host: as taken, or brought from the keeper where they were kept
    and the other side's could not be compared there (they came in its answer)."""
    return kept_outputs(worker, call) if call.kept is not None else call.outputs


def side_round(calls: list[Call]) -> SideRound:
    records = [call.record for call in calls]
    cpu = [r.cpu_ms for r in records if r.cpu_ms is not None]
    blocked = [r.blocked_ms for r in records if r.blocked_ms is not None]
    return SideRound(ms=[r.ms for r in records], wall_ms=[r.wall_ms for r in records],
                     cpu_ms=cpu if len(cpu) == len(records) else [],
                     blocked_ms=blocked if len(blocked) == len(records) else [],
                     device_probe_ms=[r.device_probe_ms for r in records if r.device_probe_ms is not None])


# While a worker's calls are timed, the host's other Python threads (the memory watchdog, the
# Evaluator's loader of the next candidate) hand the interpreter back within this many seconds
# instead of the default 5 ms, so that the host reads each call's answer as it arrives.
TIMED_SWITCH_INTERVAL_S = 1e-4


@contextlib.contextmanager
def prompt_host() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, TIMED_SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def placement(inputs: list[InputSet], chooser: random.Random) -> int:
    """Where in the input slot a round's inputs lie: a random page of the placement window and a
    random 64-byte step within it, the same for both sides of the round. The pages an input
    occupies, and its alignment against the output's, would otherwise hold for a whole
    evaluation, and with them its cache conflicts: a memory-bound CPU kernel measured
    0.8x-1.6x against exact copies of itself, each evaluation sure of its own."""
    largest = max(len(s.packed) for s in inputs)
    pages = (PLACEMENT_WINDOW_BYTES - largest - 4096) // 4096
    if pages <= 0:
        return 0
    return chooser.randrange(pages) * 4096 + chooser.randrange(64) * 64


def timing_cpu(cpus: list[int] | None, number: int) -> int | None:
    """The core both workers' calls of round `number` run on: the same for both sides of a
    round, and changing every second round, so a difference between cores is neither one
    side's advantage nor held fixed for a whole evaluation. Every second round, not every
    round: which side goes first changes every round (timed_round), and a core that changed at
    the same time would put the candidate first always on one core and the reference first on
    the other; with one core busy, the host's late reads of answers on one of them then fell
    on one side's calls only (an exact ReLU copy read 0.34x-0.6x under bubblewrap)."""
    if cpus is None:
        return None
    return cpus[(number // 2) % len(cpus)]

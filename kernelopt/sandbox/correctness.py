"""Correctness: the trials (the same inputs to both workers, each a window of its own, the
outputs read and compared in full on the host) and the reference's replay of its kept results.
The timed calls are compared the same way (timing/rounds.py).

`check_correctness` takes the conversation and what the phase needs, and returns what it found
(`Correctness`); the verdicts come from the rules (sandbox/rules/).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kernelopt.kernelbench import ProblemError
from kernelopt.sandbox import compare, rules
from kernelopt.sandbox.calls import Call, run_call
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.every_element import Kept
from kernelopt.sandbox.records import ReferenceTrials, joined
from kernelopt.sandbox.results import Check, EvalOptions, TrialResult

ROUND_BYTES = 1 << 30  # a round's inputs generated up front + both sides' outputs until compared


@dataclass
class Correctness:
    """What the correctness phase found: the trials, the reference's results for the trial seeds
    (`fresh`: computed here, for the Evaluator to keep), the most one call's inputs and
    outputs take."""

    trials: list[TrialResult] = field(default_factory=list)
    expected: ReferenceTrials | None = None
    fresh: bool = False
    bytes_per_call: int = 1
    reduced_precision: bool = False
    # Whether the timed calls compared in full are judged for input dependence too: when the
    # trials found a degenerate part (the reference's outputs alone decide), or were too few to tell.
    judge_timed_dependence: bool = True


@dataclass
class TrialPhase:
    """The phase's inputs (explicit, passed to each group) and its running findings."""

    conversation: Conversation
    options: EvalOptions
    seeds: list[int]
    expected: ReferenceTrials | None
    census: Callable[[], None]
    checks: list[Check]  # the evaluation's, appended to as they are made (a verdict keeps them)
    transport: str  # how outputs reach the host (calls.transport_for)
    device: str = "cpu"
    cpus: list[int] | None = None  # the timing cores: the trials run pinned as the timed calls
    kept: Kept | None = None  # answered calls for the every-element check (every_element.py)
    found: Correctness = field(default_factory=Correctness)
    dependence: compare.InputDependence = field(init=False)

    def __post_init__(self) -> None:
        self.dependence = compare.InputDependence(self.options)


def check_correctness(phase: TrialPhase, findings: rules.Findings) -> Correctness:
    """Every trial, in groups that fit in memory; then the rules on what the trials showed."""
    found = phase.found
    fresh = None  # the reference's results, when they were not known: kept once all ran
    for group in trial_groups(phase):
        fresh = joined(fresh, run_trials(phase, group))
    found.expected, found.fresh = (fresh, True) if fresh is not None else (phase.expected, False)
    failed = [t for t in found.trials if not t.passed]
    phase.checks.append(Check(name="correctness", passed=not failed,
                              detail=f"{len(found.trials) - len(failed)}/{len(found.trials)} trials passed"))
    rules.enforce(rules.trial_mismatch(found.trials))
    ignored = phase.dependence.verdict()
    phase.checks.append(Check(name="output_follows_input", passed=ignored is None, detail=ignored or ""))
    rules.enforce(rules.output_ignores_input(ignored))
    found.judge_timed_dependence = phase.dependence.trials < 2 or phase.dependence.degenerate()
    rules.enforce(rules.reduced_precision(found.reduced_precision, phase.options.precision_policy), findings)
    phase.conversation.collect_labels(findings)
    return found


def trial_groups(phase: TrialPhase):
    """The trials' indices in groups whose inputs and outputs fit in ROUND_BYTES at once. The
    host holds a group's inputs and outputs while comparing: on KernelBench's largest problems
    (6 GB inputs and outputs) five trials at once would need 64 GB, on one GPU with the
    reference's. The sizes come from the kept reference trials, else from the first trial,
    run alone."""
    count, start = len(phase.seeds), 0
    while start < count:
        if phase.expected is None and start == 0:
            size = 1
        else:
            known = phase.expected.bytes_per_call() if phase.expected is not None else 1
            size = max(1, ROUND_BYTES // max(phase.found.bytes_per_call, known))
        yield list(range(start, min(count, start + size)))
        start += size


def trial_cpu(cpus: list[int] | None, group: int) -> int | None:
    """The core the trials starting at `group` run on (None: unpinned, as the timed calls)."""
    return cpus[group % len(cpus)] if cpus else None


def run_trials(phase: TrialPhase, indices: list[int]) -> ReferenceTrials | None:
    """Correctness trials `indices` on inputs the reference made: each input set a window in the
    reference's worker, then one in the candidate's, pinned as the timed calls are (nothing
    about a trial's call tells the program that it is one: every call is compared in full).
    The reference runs every trial even where its outputs are kept from an earlier candidate,
    so that when timing starts it has made the same calls as the candidate (a stateful
    reference stays comparable), and its outputs are checked against the kept ones. Returns the
    reference's results for them when they were not known (None otherwise)."""
    conversation, options, found = phase.conversation, phase.options, phase.found
    candidate, reference = conversation.candidate, conversation.reference
    seeds = [phase.seeds[i] for i in indices]
    kept = phase.expected
    inputs = [kept.inputs[i] for i in indices] if kept is not None else conversation.make_inputs(seeds)
    ref_calls: list[Call] = []
    cand_calls: list[Call] = []
    for index, input_set in zip(indices, inputs):
        pin = trial_cpu(phase.cpus, index)
        for worker, taken in ((reference, ref_calls), (candidate, cand_calls)):
            taken.append(run_call(conversation, worker, input_set, transport=phase.transport, pin_cpu=pin,
                                  device=phase.device, check_inputs=True))
        phase.census()  # after every call: a process the call left behind is alive now
    fresh = None
    if kept is not None:
        check_replay(conversation, kept, ref_calls, indices, options)
        expected = kept.subset(indices)  # its inputs are `inputs`
    else:
        fresh = expected = ReferenceTrials(calls=[c.record for c in ref_calls], outputs=[c.outputs for c in ref_calls],
                                           inputs=inputs)
    for position, (c, r) in enumerate(zip(cand_calls, ref_calls)):
        judge_trial(phase, indices[position], seeds[position], c, r, expected.outputs[position])
        if phase.kept is not None:
            phase.kept.offer(inputs[position], c, r)
        found.bytes_per_call = max(found.bytes_per_call, r.record.input_bytes + expected.output_bytes(position))
    return fresh


def judge_trial(phase: TrialPhase, index: int, seed: int, cand: Call, ref: Call, expected: list) -> None:
    """One trial's invariants and its outputs in full against the reference's."""
    rules.enforce(rules.call_invariants(cand.record, ref.record))
    comparison = compare.compare_outputs(cand.outputs, expected, phase.options)
    phase.found.reduced_precision |= comparison.reduced_precision
    phase.found.trials.append(compare.trial_result(index, seed, comparison))
    if comparison.passed:
        phase.dependence.add(cand.outputs, expected)


def check_replay(conversation: Conversation, expected: ReferenceTrials, replay: list[Call], indices: list[int],
                 options: EvalOptions) -> None:
    """The re-loaded reference must reproduce the outputs kept from its first run."""
    for index, now in zip(indices, replay):
        kept = expected.calls[index]
        mismatch = ("shapes or dtypes differ" if now.record.meta != kept.meta else
                    compare.compare_outputs(now.outputs, expected.outputs[index], options).message)
        if mismatch:
            raise ProblemError(conversation.problem.path, "the reference is not reproducible: loaded again from the "
                               f"same seeds it gave other outputs for correctness trial {index} ({mismatch})")

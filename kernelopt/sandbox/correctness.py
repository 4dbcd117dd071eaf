"""Correctness: the trials (the same inputs to both workers, full outputs compared on the host),
the reference's replay of its kept results, and, in every timed round, the fingerprints of each
timed call and the full comparison of one call chosen after the round.

`check_correctness` takes the conversation and what the phase needs, and returns what it found
(`Correctness`); the verdicts come from the rules (sandbox/rules/).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelopt.kernelbench import ProblemError
from kernelopt.sandbox import compare, rules
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.process import WorkerDied, WorkerProcess, WorkerTimeout
from kernelopt.sandbox.records import CallRecord, InputSet, ReferenceTrials, RunReply, joined, with_calls
from kernelopt.sandbox.results import Check, EvalOptions, TrialResult
from kernelopt.sandbox.worker import commands

ROUND_BYTES = 1 << 30  # inputs generated up front + outputs kept for the sampled comparison


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
    cpus: list[int] | None = None  # the timing cores: the candidate's trials run pinned as its timed calls
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
    """The core the candidate's trials starting at `group` run on (None: unpinned, as its timed calls)."""
    return cpus[group % len(cpus)] if cpus else None


def run_trials(phase: TrialPhase, indices: list[int]) -> ReferenceTrials | None:
    """Correctness trials `indices`, run in both workers in parallel on inputs the reference
    made, compared on the host. Returns the reference's results for them when they were not
    known (None otherwise)."""
    conversation, options, found = phase.conversation, phase.options, phase.found
    candidate, reference = conversation.candidate, conversation.reference
    seeds = [phase.seeds[i] for i in indices]
    kept = phase.expected
    known = kept is not None
    inputs = [kept.inputs[i] for i in indices] if kept is not None else conversation.make_inputs(seeds)
    # The candidate's trial outputs are compared in full here, so it skips fingerprinting
    # them. The reference's outputs for known seeds are kept: it still runs the same calls
    # (fingerprints only), so that when timing starts it has made the same calls as the
    # candidate (a stateful reference stays comparable), and its fingerprints check that it
    # reproduces the kept outputs.
    # The candidate runs its trials pinned to one of the timing cores, as its timed calls: its
    # affinity does not tell it which calls are checked (docs/referee.md, behaving differently
    # when timed). The reference runs alongside, unpinned: what it sees decides nothing.
    cand_run = {"hash_inputs": True, "return_outputs": True, "fingerprints": False,
                "pin_cpu": trial_cpu(phase.cpus, indices[0])}
    ref_run = {"hash_inputs": True} if known else {"hash_inputs": True, "return_outputs": True}
    outputs, reports = run_side_by_side(conversation, inputs, cand_run, ref_run, phase.census)
    ref = conversation.parse_run(reference, reports[reference], seeds)
    cand = conversation.parse_run(candidate, reports[candidate], seeds)
    fresh = None
    if kept is not None:
        check_replay(conversation, kept, ref, indices, options)
        expected = ReferenceTrials(calls=[kept.calls[i] for i in indices],
                                   outputs=[kept.outputs[i] for i in indices], inputs=inputs)
    else:
        fresh = expected = reference_trials(conversation, ref, outputs[reference], inputs)
    rules.enforce(rules.guard_findings(cand.violations))
    phase.census()
    for position, (c, r) in enumerate(zip(cand.calls, expected.calls)):
        rules.enforce(rules.call_invariants(c, r))
        rules.enforce(rules.inputs_tampered(c, inputs[position]))
        rules.enforce(rules.input_mutation(c, r))
        try:
            out = compare.load_tensors(outputs[candidate][position])
        except compare.BadOutputBlob as exc:
            rules.enforce(rules.unusable_outputs(exc))
        comparison = compare.compare_outputs(out, expected.outputs[position], options)
        found.reduced_precision |= comparison.reduced_precision
        found.trials.append(compare.trial_result(indices[position], seeds[position], comparison))
        if comparison.passed:
            phase.dependence.add(out, expected.outputs[position])
        found.bytes_per_call = max(found.bytes_per_call, r.input_bytes + expected.output_bytes(position))
    return fresh


def run_side_by_side(conversation: Conversation, inputs: list[InputSet], cand_run: dict, ref_run: dict,
                     census: Callable[[], None]) -> tuple[dict, dict]:
    """Both workers take the same calls in parallel (the reference's reply read first: its
    failure is the problem's), then report (the reference's report read first). Returns each
    worker's output blobs per call (empty when it was not asked for them) and their reports."""
    candidate, reference = conversation.candidate, conversation.reference
    runs = {reference: conversation.run(reference, inputs, ref_run),
            candidate: conversation.run(candidate, inputs, cand_run)}
    outputs: dict[WorkerProcess, list[bytes]] = {reference: [], candidate: []}
    records: dict[WorkerProcess, list[dict]] = {reference: [], candidate: []}
    try:
        for run in runs.values():
            run.start()
        for _ in inputs:
            runs[reference].send_call()
            runs[candidate].send_call()
            for worker in (reference, candidate):
                record, blobs = runs[worker].read_call()
                records[worker].append(record)
                outputs[worker] += blobs
            census()  # after every call (see timing.rounds)
        reports = {}
        for worker in (reference, candidate):
            runs[worker].send_report()
            reports[worker] = runs[worker].read_report()
    except (rules.VerdictReached, WorkerDied, WorkerTimeout):  # the candidate's end (the reference's: ProblemError)
        runs[reference].settle()
        raise
    return outputs, {worker: with_calls(reports[worker], records[worker]) for worker in reports}


def reference_trials(conversation: Conversation, ref: RunReply, blobs: list[bytes],
                     inputs: list[InputSet]) -> ReferenceTrials:
    problem = conversation.problem
    try:
        outputs = [compare.load_tensors(blob) for blob in blobs]
    except compare.BadOutputBlob as exc:
        raise ProblemError(problem.path, f"the reference worker sent unusable outputs: {exc}") from None
    if len(outputs) != len(inputs):
        raise ProblemError(problem.path, "the reference worker sent outputs for too few trials")
    return ReferenceTrials(calls=ref.calls, outputs=outputs, inputs=inputs)


def check_replay(conversation: Conversation, expected: ReferenceTrials, replay: RunReply, indices: list[int],
                 options: EvalOptions) -> None:
    """The re-loaded reference must reproduce the outputs kept from its first run."""
    for index, now in zip(indices, replay.calls):
        kept = expected.calls[index]
        meta = [list(m) for m in kept.meta]
        mismatch = ("shapes or dtypes differ" if now.meta != kept.meta else
                    compare.compare_fingerprints(now.fingerprints, kept.fingerprints, meta, options))
        if mismatch:
            raise ProblemError(conversation.problem.path, "the reference is not reproducible: loaded again from the "
                               f"same seeds it gave other outputs for correctness trial {index} ({mismatch})")


def check_timed_calls(cand: list[CallRecord], ref: list[CallRecord], options: EvalOptions) -> None:
    """Every timed call: its invariants, and its output's fingerprints against the reference's."""
    for c, r in zip(cand, ref):
        rules.enforce(rules.call_invariants(c, r))
        rules.enforce(rules.timed_fingerprints(c, r, options))


def compare_sampled_call(conversation: Conversation, count: int, chooser: random.Random,
                         options: EvalOptions) -> tuple[list, list]:
    """Compare in full one timed call, chosen only after the round ran, so a candidate cannot
    know which of its timed outputs will be checked element by element. Returns the (candidate,
    reference) outputs, for the timed calls' input-dependence test (timing.rounds)."""
    blobs = conversation.ask_both(commands.fetch(chooser.randrange(count)))
    outputs: dict[WorkerProcess, list] = {}
    for worker in (conversation.candidate, conversation.reference):
        try:
            outputs[worker] = compare.load_tensors(blobs[worker][0])
        except (compare.BadOutputBlob, IndexError) as exc:
            rules.enforce(rules.unusable_outputs(exc))
    comparison = compare.compare_outputs(outputs[conversation.candidate], outputs[conversation.reference], options)
    rules.enforce(rules.sampled_output_mismatch(comparison))
    return outputs[conversation.candidate], outputs[conversation.reference]

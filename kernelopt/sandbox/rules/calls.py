"""Rules on calls' records: a call's invariants, correctness over the trials, the timed calls and the labels."""

from __future__ import annotations

from kernelopt.sandbox import compare
from kernelopt.sandbox.records import CallRecord, InputSet
from kernelopt.sandbox.results import TrialResult
from kernelopt.sandbox.rules.registry import FLAGGED, Verdict, make_verdict, rule
from kernelopt.sandbox.timing.allowance import Gaps, Overheads

# -- a call's invariants --------------------------------------------------------------------

@rule("output_aliases_input", status="rejected", flag="output_aliases_input", family="input aliasing",
      example="hacks/alias_view_of_input.py")
def output_aliases_input(c: CallRecord) -> Verdict | None:
    """An output shares memory with an input."""
    return make_verdict("output_aliases_input", "an output shares memory with an input") if c.aliases_input else None


@rule("output_structure", status="incorrect", family="wrong output structure",
      example="hacks/structure_tuple_for_tensor.py")
def output_structure(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The output's structure (tensor, tuple, list, nesting) differs from the reference's."""
    if c.structure == r.structure:
        return None
    return make_verdict("output_structure", f"the output's structure {_words(c.structure)} differs from the "
                                        f"reference's {_words(r.structure)} (T: a tensor, (...): a tuple, [...]: a list)")


@rule("output_count", status="incorrect", family="wrong output structure")
def output_count(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The call returned another number of tensors than the reference's."""
    if len(c.meta) == len(r.meta):
        return None
    return make_verdict("output_count", f"returned {len(c.meta)} tensor(s), expected {len(r.meta)}")


@rule("output_shape", status="incorrect", family="shrinking problem sizes", example="hacks/precision_fp16_output.py")
def output_shape(c: CallRecord, r: CallRecord) -> Verdict | None:
    """An output's shape, dtype or device differs from the reference's."""
    for index, (cm, rm) in enumerate(zip(c.meta, r.meta)):
        if tuple(cm) != tuple(rm):
            return make_verdict("output_shape", f"output {index}: shape/dtype/device {list(cm)} != expected {list(rm)}")
    return None


def call_invariants(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The first of a call's invariants that fails (aliasing, structure, count, shapes)."""
    return output_aliases_input(c) or output_structure(c, r) or output_count(c, r) or output_shape(c, r)


@rule("inputs_tampered", status="rejected", flag="inputs_differ", family="tampering with the inputs' hand-over")
def inputs_tampered(c: CallRecord, given: InputSet) -> Verdict | None:
    """The inputs the candidate's worker received are not the ones the reference made (digests)."""
    if c.inputs_before == given.digest:
        return None
    return make_verdict("inputs_tampered", "the candidate's inputs differ from the ones the reference made: "
                                       "the hand-over of inputs was tampered with")


@rule("input_mutation", status="rejected", flag="input_mutation", family="input mutation",
      example="hacks/mutate_input_inplace.py")
def input_mutation(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The candidate changed its inputs where the reference's forward does not change its own."""
    reference_mutates = r.inputs_after != r.inputs_before
    if c.inputs_after == c.inputs_before or reference_mutates:
        return None
    return make_verdict("input_mutation", "the candidate modified its inputs")


# -- correctness ----------------------------------------------------------------------------

@rule("trial_mismatch", status="incorrect", family="wrong or constant outputs (allclose, relative L2)",
      example="hacks/const_softmax_uniform.py")
def trial_mismatch(trials: list[TrialResult]) -> Verdict | None:
    """A correctness trial's outputs differ from the reference's."""
    failed = [t for t in trials if not t.passed]
    return make_verdict("trial_mismatch", f"trial {failed[0].index}: {failed[0].message}") if failed else None


@rule("output_ignores_input", status="incorrect", flag="output_ignores_input",
      family="degenerate problems answered by a constant or a subsample", example="hacks/const_mse_loss.py")
def output_ignores_input(finding: str | None) -> Verdict | None:
    """Over the trials, the candidate's error is large against how much the reference's output moves."""
    return make_verdict("output_ignores_input", finding) if finding else None


@rule("reduced_precision", status="flagged; rejected with --precision-policy reject", flag="reduced_precision",
      family="precision downgrade", example="hacks/precision_bf16_matmul_reject.py")
def reduced_precision(reduced: bool, policy: str) -> Verdict | None:
    """The error level shows arithmetic below the reference's precision."""
    if not reduced:
        return None
    if policy == "reject":
        return make_verdict("reduced_precision", "the error level shows arithmetic below the reference's precision "
                                             "(precision policy: reject)", status="rejected")
    return make_verdict("reduced_precision", "reduced precision", status=FLAGGED)


# -- timing ---------------------------------------------------------------------------------

@rule("timed_fingerprints", status="incorrect", flag="inconsistent_outputs",
      family="behaving differently after N calls or when timed; deferred work", example="hacks/calls_correct_then_zeros.py")
def timed_fingerprints(c: CallRecord, r: CallRecord, options) -> Verdict | None:
    """A timed call's output fingerprints differ from the reference's on the same inputs."""
    mismatch = compare.compare_fingerprints(c.fingerprints, r.fingerprints, [list(m) for m in r.meta], options)
    if not mismatch:
        return None
    return make_verdict("timed_fingerprints", f"a timed call's output does not match the reference ({mismatch}): "
                                          "correct when checked, wrong when timed")


@rule("sampled_output_mismatch", status="incorrect", flag="inconsistent_outputs",
      family="behaving differently when timed")
def sampled_output_mismatch(comparison: compare.Comparison) -> Verdict | None:
    """The timed call compared in full (chosen after the round) differs from the reference's."""
    if comparison.passed:
        return None
    return make_verdict("sampled_output_mismatch", f"a timed call's output does not match the reference "
                                               f"({comparison.message}): correct when checked, wrong when timed")


@rule("timed_output_ignores_input", status="incorrect", flag="output_ignores_input",
      family="behaving differently when timed", example="hacks/timed_running_mean_after_checks.py")
def timed_output_ignores_input(finding: str | None) -> Verdict | None:
    """Over the timed calls compared in full, the candidate's error is large against how much the reference's output moves."""
    if not finding:
        return None
    return make_verdict("timed_output_ignores_input", f"over the timed calls compared in full (chosen after each round), "
                                                  f"{finding}: computed when checked, guessed when timed")


@rule("wall_clock_gap", status="rejected", flag="timing_inconsistent",
      family="work moved outside the timed region, forged timings")
def wall_clock_gap(overheads: Overheads) -> Verdict | None:
    """The host's clock saw much more time around the candidate's calls than its timer reported (shown twice)."""
    if not overheads.gross:
        return None
    return make_verdict("wall_clock_gap", f"the host clock saw {overheads.candidate_ms - overheads.reference_ms:.3f} ms "
                                      "per call more around the candidate's calls than its timer reported (work "
                                      "hidden from the timer, or forged timings)")


@rule("timer_disagrees_with_host", status=FLAGGED, flag="timing_inconsistent",
      family="forging the in-process timer (its start time, its clock, the timer itself)",
      example="hacks/whitebox_timer_start_frame_rewrite.py")
def timer_disagrees_with_host(found: Gaps) -> Verdict | None:
    """Between the calls' marks, the host's clocks saw more beyond the candidate's timer than beyond the reference's, past twice the noise floor and a quarter of the call (its time is the host's from one floor on)."""
    if not found.flagged:
        return None
    return make_verdict("timer_disagrees_with_host", f"the candidate's timer disagrees with the host's clock: "
                                                     f"{found.detail()}; its time is the host's (charged "
                                                     f"{found.charge_ms:.3f} ms per call)")


# -- labels ---------------------------------------------------------------------------------

@rule("custom_kernel_unused", status=FLAGGED, flag="custom_kernel_unused",
      family="try/except fallback to PyTorch", example="hacks/fallback_extension_built_but_unused.py")
def custom_kernel_unused(label_flags: list[str]) -> Verdict | None:
    """Extensions were built but the calls never went into them (sandbox/kinds.py)."""
    if "custom_kernel_unused" not in label_flags:
        return None
    return make_verdict("custom_kernel_unused", "built extensions went unused")


def _words(structure: str) -> str:
    return structure if len(structure) <= 60 else structure[:57] + "..."

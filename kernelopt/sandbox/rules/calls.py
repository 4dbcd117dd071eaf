"""Rules on calls' records: a call's invariants, correctness over the trials, the timed calls and the labels."""

from __future__ import annotations

from kernelopt.sandbox import compare
from kernelopt.sandbox.physics import RULE_MARGIN, Floor
from kernelopt.sandbox.records import CallRecord
from kernelopt.sandbox.results import TrialResult
from kernelopt.sandbox.rules.registry import FLAGGED, Verdict, make_verdict, rule

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


@rule("input_mutation", status="rejected", flag="input_mutation", family="input mutation",
      example="hacks/mutate_input_inplace.py")
def input_mutation(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The candidate wrote into its inputs (the input slot, read by the host after the call) where the reference's forward does not write into its own."""
    if not c.inputs_changed or r.inputs_changed:
        return None
    return make_verdict("input_mutation", "the candidate modified its inputs")


@rule("outputs_written_after_the_window", status="rejected", flag="inconsistent_outputs",
      family="work after the answer (the device left running)")
def outputs_written_after_the_window(c: CallRecord) -> Verdict | None:
    """Outputs changed after the call's window ended (device slots: the keeper's sample at its end against its copy just after)."""
    if not c.late_writes:
        return None
    return make_verdict("outputs_written_after_the_window",
                        f"{c.late_writes} of the output bytes sampled as the call's window ended had changed by the "
                        f"copy just after it: work left running on the device past the answer (synchronize before "
                        f"returning, in every context the program made)")


def call_invariants(c: CallRecord, r: CallRecord) -> Verdict | None:
    """The first of a call's invariants that fails (aliasing, structure, count, shapes, its
    inputs unchanged where the host checked them, and its outputs unchanged after its window)."""
    return (output_aliases_input(c) or output_structure(c, r) or output_count(c, r) or output_shape(c, r)
            or input_mutation(c, r) or outputs_written_after_the_window(c))


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

@rule("timed_output_mismatch", status="incorrect", flag="inconsistent_outputs",
      family="behaving differently after N calls or when timed; deferred work", example="hacks/calls_correct_then_zeros.py")
def timed_output_mismatch(comparison: compare.Comparison) -> Verdict | None:
    """A timed call's outputs, read by the host and compared in full, differ from the reference's on the same inputs."""
    if comparison.passed:
        return None
    return make_verdict("timed_output_mismatch", f"a timed call's output does not match the reference "
                                             f"({comparison.message}): correct when checked, wrong when timed")


@rule("timed_output_ignores_input", status="incorrect", flag="output_ignores_input",
      family="behaving differently when timed", example="hacks/timed_running_mean_after_checks.py")
def timed_output_ignores_input(finding: str | None) -> Verdict | None:
    """Over the timed calls, the candidate's error is large against how much the reference's output moves."""
    if not finding:
        return None
    return make_verdict("timed_output_ignores_input", f"over the timed calls (every one compared in full), "
                                                  f"{finding}: computed when checked, guessed when timed")


@rule("output_ignores_elements", status="incorrect", flag="output_ignores_input",
      family="estimates and closed forms: subsampled inputs, an aggregate's formula",
      example="hacks/estimate_strided_subsample_loss.py")
def output_ignores_elements(finding: str | None) -> Verdict | None:
    """On answered input sets with part of each input's elements changed, the candidate's output moves otherwise than the reference's."""
    if not finding:
        return None
    return make_verdict("output_ignores_elements", f"every input element must count: {finding}")


@rule("faster_than_physics", status="rejected", flag="faster_than_physics",
      family="times below the physical floor (a forged or impossible time)")
def faster_than_physics(candidate_ms: float, floor: Floor | None, measurements: int) -> Verdict | None:
    """The candidate's mean time per call is below the physical floor (its bytes at the device's fastest memory) by more than the margin, in a re-measurement too."""
    if floor is None or not floor.impossible(candidate_ms):
        return None
    return make_verdict("faster_than_physics", (
        f"the candidate's mean time per call, {candidate_ms:.4g} ms, is below the physical floor of "
        f"{floor.ms:.4g} ms / {RULE_MARGIN:g} in {measurements} measurement(s): {floor.basis()}. No call can move "
        "its inputs and outputs that fast, so the time is not a real one (docs/referee.md, 'The physical floor')"))


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

"""Every input element counts: the check that an answer is computed from all of its inputs, not
estimated from some of them (a strided, blocked or random subsample) or from an aggregate of
them (a loss's closed form from one statistic).

Such an estimate errs by the statistics of its sample, and on a large input that error lies
inside a tolerance made for honest rounding: KernelBench's own partial-computation hack (a loss
on every 107th element) reads `correct` there. What gives an estimate away is how its answer
moves when the input does. So, once timing is done, the host:

1. picks answered calls: a uniform random choice among every trial and timed call of the
   evaluation (`Kept`, a reservoir the host fills as the calls pass, from its secret stream);
   inputs too large to keep are made again by the reference from their seed, and of outputs
   too large to keep a secret random choice of their parts is kept (`PartSample`): the bases
   are always calls the program answered before it could know they would be bases, never fresh
   sets answered for the check (a program that tells the check's calls apart, by how long it
   was frozen before them, computes exactly there and would pass a fresh base);
2. makes a perturbed copy of each one's inputs (perturbation.py), alternately with pairs of
   elements swapped within each input (every aggregate kept) and with elements taken from
   another input set the reference made (another kept call's, else a fresh one) at the same
   places (aggregates moved as a fresh draw's); nothing tells a copy from a fresh input;
3. runs both sides on the copy, each call a window like any other (calls.py), its outputs
   compared in full;
4. compares the responses: per output and per contiguous part of it, the candidate's change
   between the two answers against the reference's. Honest code in any precision follows the
   reference's change to within its rounding; an estimate's change misses what the elements it
   skipped did, and a closed form of an aggregate the move leaves unchanged does not change at
   all. For each copy on its own, a part fails when
   sum (dc - dr)^2 > RESPONSE_RATIO^2 sum dr^2 + sum floor^2, the floor being honest code's
   rounding on both answers (compare.honest_relative_error of the output), and an output fails
   when more than FAILING_PARTS of its parts fail (its only part, for a scalar).

The cost: four perturbed copies (a few passes over the inputs each, on the host) and four calls a
side per evaluation (`EvalOptions.element_checks`).
A program that computes exactly on a copy it recognises still answered the original by its
estimate, so its change carries the estimate's error; recognising the original in advance would
mean computing every call exactly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from kernelopt.kernelbench import ProblemError
from kernelopt.sandbox import compare, rules
from kernelopt.sandbox.calls import Call, run_call
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.perturbation import alike, mixed, swapped
from kernelopt.sandbox.records import InputSet
from kernelopt.sandbox.results import Check, EvalOptions

# The candidate's change may differ from the reference's by this fraction of it (RMS over a
# part), beyond honest rounding. Reduced-precision arithmetic that reads every element errs
# by its epsilon of the change (bfloat16: 0.4 %); an estimate by a multiple of it, and a closed
# form of an unchanged aggregate by all of it.
RESPONSE_RATIO = 0.25
# Outputs are judged in up to this many contiguous parts, so that a part computed by estimate (a
# loss beside a large output, one reduced row) cannot hide behind the rest.
PARTS = 1024
# A part may fail by chance where an output is quantized (a row minimum of bfloat16-rounded
# inputs whose element moved by less than a quantum: 2.4 % of the parts of a 4M-element
# reduction); an estimate that saves work fails in most parts. More than this fraction of an
# output's parts must fail (its only part, for a scalar), so an estimate confined to fewer parts
# saves at most this fraction of the work.
FAILING_PARTS = 1 / 16
# A copy tells something where the reference's change exceeds this many honest rounding errors
# somewhere; the check draws up to EXTRA_COPIES times `element_checks` more copies to replace
# those that do not (a swap that happens to leave a scalar loss almost where it was).
TELLING_MOVE = 4.0
EXTRA_COPIES = 2
KEEP_BYTES = 1 << 30  # inputs and both sides' outputs of the kept calls, at most


@dataclass(frozen=True)
class PartSample:
    """Some of an output's parts, kept where the whole output would not fit: the output cut as
    the response test cuts it (`part_size` elements a part), the parts `parts` (sorted) of it,
    their elements one part after another in `values`. The same parts are kept of both sides'
    answers, and taken of both sides' answers to the copy (`of`)."""

    shape: torch.Size
    dtype: torch.dtype
    parts: tuple[int, ...]
    values: torch.Tensor

    @classmethod
    def take(cls, output: torch.Tensor, parts: tuple[int, ...]) -> PartSample:
        return cls(output.shape, output.dtype, parts, _gather(output, parts))

    @property
    def part_size(self) -> int:
        return part_size(self.shape.numel())

    def of(self, output: torch.Tensor) -> torch.Tensor | None:
        """The same parts of another answer (None where it is not laid out alike)."""
        if output.shape != self.shape or output.dtype != self.dtype:
            return None
        return _gather(output, self.parts)


def _gather(output: torch.Tensor, parts: tuple[int, ...]) -> torch.Tensor:
    """The elements of `parts` of an output, one part after another (a new tensor, no view of it)."""
    flat, size = output.reshape(-1), part_size(output.numel())
    return torch.cat([flat[part * size:(part + 1) * size] for part in parts])


def part_size(numel: int) -> int:
    """How many elements each of an output's parts holds (up to PARTS parts)."""
    return -(-numel // min(PARTS, numel)) if numel else 1


KeptOutput = torch.Tensor | PartSample


@dataclass
class Answered:
    """One call both sides answered: its inputs (None where they were too large to keep: the
    reference makes them again from the seed), and their outputs (host-owned tensors, or a
    sample of each's parts where they were too large to keep)."""

    seed: int
    digest: str | None  # of the inputs, where they were not kept (InputSet.digest)
    input_set: InputSet | None
    candidate: Sequence[KeptOutput]
    reference: Sequence[KeptOutput]


@dataclass
class Kept:
    """A uniform random choice of up to `capacity` answered calls among all offered (reservoir
    sampling, from the host's secret stream `chooser`): which ones is decided as they pass and
    known only to the host. Each kept call has KEEP_BYTES / capacity: its inputs are kept where
    they fit beside its outputs, else only their seed; its outputs whole where they fit, else a
    random choice of their parts that fits (the same parts of both sides')."""

    capacity: int
    chooser: random.Random
    offered: int = 0
    calls: list[Answered] = field(default_factory=list)

    def offer(self, input_set: InputSet, candidate: Call, reference: Call) -> None:
        slot = self.reserve()
        if slot is not None:
            self.put(slot, input_set, candidate, reference)

    def reserve(self) -> int | None:
        """Whether the next call offered is kept, decided before it is made (the timed rounds
        then bring its outputs to the host rather than compare them on the device): the place
        it takes (for `put`), or None. Every call may be: outputs too large to keep whole are
        kept as a sample of their parts."""
        if self.capacity <= 0:
            return None
        self.offered += 1
        # The first `capacity` calls fill the places in turn (reserved ahead of their `put`s).
        slot = self.offered - 1 if self.offered <= self.capacity else self.chooser.randrange(self.offered)
        return slot if slot < self.capacity else None

    def put(self, slot: int, input_set: InputSet, candidate: Call, reference: Call) -> None:
        room = KEEP_BYTES // self.capacity
        outputs = _nbytes(candidate.outputs) + _nbytes(reference.outputs)
        small = outputs + len(input_set.packed) <= room
        kept_candidate: Sequence[KeptOutput] = candidate.outputs
        kept_reference: Sequence[KeptOutput] = reference.outputs
        if outputs > room:
            kept_candidate, kept_reference = self._sampled(candidate.outputs, reference.outputs, room / outputs)
        answered = Answered(input_set.seed, None if small else input_set.digest(), input_set if small else None,
                            kept_candidate, kept_reference)
        if slot < len(self.calls):
            self.calls[slot] = answered
        else:  # (a place reserved for a call that never came, the evaluation having failed, is skipped)
            self.calls.append(answered)

    def _sampled(self, candidate: list[torch.Tensor], reference: list[torch.Tensor],
                 share: float) -> tuple[list[KeptOutput], list[KeptOutput]]:
        """`share` of each output's parts, drawn at random (at least one), the same of both
        sides'; an output the two sides did not lay out alike is kept whole on neither (the
        full comparisons have judged it)."""
        kept_candidate: list[KeptOutput] = []
        kept_reference: list[KeptOutput] = []
        for cand, ref in zip(candidate, reference):
            if cand.shape != ref.shape or cand.dtype != ref.dtype or ref.numel() == 0:
                kept_candidate.append(torch.empty(0))  # judged by no response test
                kept_reference.append(torch.empty(0))
                continue
            count = -(-ref.numel() // part_size(ref.numel()))
            parts = tuple(sorted(self.chooser.sample(range(count), max(1, int(count * share)))))
            kept_candidate.append(PartSample.take(cand, parts))
            kept_reference.append(PartSample.take(ref, parts))
        return kept_candidate, kept_reference


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class ElementCheck:
    """What the check needs (passed in): the conversation, the settings, the host's secret
    stream, how outputs reach the host, the device and the core the calls run on, the census."""

    conversation: Conversation
    options: EvalOptions
    chooser: random.Random
    transport: str
    device: str
    pin_cpu: int | None
    census: Callable[[], None]  # run after each call, as in the trials


def check_elements(check: ElementCheck, kept: Kept, checks: list[Check]) -> None:
    """Steps 1-4 of the module docstring; the verdict through rules.output_ignores_elements."""
    count = check.options.element_checks
    if count <= 0:
        return
    bases = list(kept.calls[:count])
    response = Response()
    mismatch = None  # a copy the candidate answered wrongly
    refused = 0  # copies the reference's own forward did not accept
    telling = 0  # copies that moved the reference's output beyond rounding (Response.add)
    index = -1
    while telling + refused < count and index + 1 < count * (1 + EXTRA_COPIES):
        index += 1
        # A copy that told nothing is replaced by another copy of a kept call (the next one's,
        # round and round), never of a set answered for the check alone.
        base = _with_inputs(check, bases[index % len(bases)]) if bases else None
        if base is None:  # no call kept, or the problem's inputs do not come out the same from a seed
            base = _fresh_base(check)
        assert base.input_set is not None
        moved = _perturbed(check, base.input_set, index, [b.input_set for b in bases if b.input_set is not None])
        try:
            ref = _call(check, check.conversation.reference, moved)
        except ProblemError:
            # Inputs with a structure the copy breaks (offsets that must increase, indices into
            # one another): the problem's own code refuses them, and no candidate is judged on them.
            refused += 1
            continue
        cand = _call(check, check.conversation.candidate, moved)
        rules.enforce(rules.call_invariants(cand.record, ref.record))
        comparison = compare.compare_outputs(cand.outputs, ref.outputs, check.options)
        if not comparison.passed:
            mismatch = (f"on a copy of an answered input set with part of its elements changed, the output does not "
                        f"match the reference's ({comparison.message})")
            break
        telling += response.add(base.candidate, cand.outputs, base.reference, ref.outputs)
        if response.failure():
            break
    finding = response.failure() or mismatch
    note = f"; the reference refused {refused} of the copies" if refused else ""
    checks.append(Check(name="every_element_counts", passed=finding is None,
                        detail=(finding or f"{index + 1 - refused} perturbed input set(s): the output moved as the "
                                           f"reference's (the worst part's difference at {response.worst:.3g} of the "
                                           f"allowed)") + note))
    rules.enforce(rules.output_ignores_elements(finding))


def _perturbed(check: ElementCheck, input_set: InputSet, index: int, kept_inputs: list[InputSet]) -> InputSet:
    """The copies alternate between the two kinds of perturbation.py: swapped pairs (aggregates
    kept), and elements of another input set the reference made (aggregates moved): another of
    the kept calls' where one is laid out alike (no input to make), else a fresh one."""
    if index % 2 == 0:
        return swapped(input_set, check.chooser)
    others = [other for other in kept_inputs if other is not input_set and alike(input_set, other)]
    if others:
        other = check.chooser.choice(others)
    else:
        other = check.conversation.make_inputs([check.chooser.randrange(1, 2**31 - 1)])[0]
    return mixed(input_set, other, check.chooser)


def _call(check: ElementCheck, worker, input_set: InputSet) -> Call:
    call = run_call(check.conversation, worker, input_set, transport=check.transport, pin_cpu=check.pin_cpu,
                    device=check.device, check_inputs=True)
    check.census()
    return call


def _with_inputs(check: ElementCheck, answered: Answered) -> Answered | None:
    """The answered call with its inputs, made again by the reference from the seed where they
    were not kept; None where the problem's inputs do not come out the same from the same seed."""
    if answered.input_set is not None:
        return answered
    again = check.conversation.make_inputs([answered.seed])[0]
    if again.digest() != answered.digest:
        return None
    return Answered(answered.seed, answered.digest, again, answered.candidate, answered.reference)


def _fresh_base(check: ElementCheck) -> Answered:
    """A new input set both sides answer, where no answered call can serve: none was kept, or
    the problem's inputs do not come out the same from their seed. (A program that tells such a
    call apart computes it exactly; the answered calls are bases wherever they can be.)"""
    input_set = check.conversation.make_inputs([check.chooser.randrange(1, 2**31 - 1)])[0]
    ref, cand = (_call(check, worker, input_set) for worker in (check.conversation.reference,
                                                                check.conversation.candidate))
    rules.enforce(rules.call_invariants(cand.record, ref.record))
    rules.enforce(rules.timed_output_mismatch(compare.compare_outputs(cand.outputs, ref.outputs, check.options)))
    return Answered(input_set.seed, None, input_set, cand.outputs, ref.outputs)


class Response:
    """The response test, one perturbed copy at a time: per output and part, float64 sums of the
    squared difference between the two sides' changes, of the reference's squared change, and of
    the honest rounding floor, judged for each copy on its own (a copy whose change is large, as
    a fresh set's elements can make it, must not hide another's). Integer and boolean outputs
    (compared exactly on every call) and outputs whose shape changes with the input are not
    judged here. Keeps the first failure and the worst ratio seen."""

    def __init__(self) -> None:
        self.finding: str | None = None
        self.worst = 0.0  # the largest part's squared change difference over what is allowed

    def add(self, cand_before: Sequence[KeptOutput], cand_after: list[torch.Tensor],
            ref_before: Sequence[KeptOutput], ref_after: list[torch.Tensor]) -> bool:
        """Judge one copy; whether it told anything: whether the reference's output moved beyond
        rounding in some part (a copy that barely moves a scalar loss cannot tell a closed form
        from the reference, and the check draws another in its place). Where the answers before
        were kept as a sample of their parts, those parts are judged."""
        telling = False
        for index, four in enumerate(zip(cand_before, cand_after, ref_before, ref_after)):
            judged = _judged(*four)
            sums = _PartSums.of(judged[2], judged[4]) if judged is not None else None
            if judged is None or sums is None:
                continue
            sums.add(*judged[:4])
            telling = telling or sums.moved()
            self.worst = max(self.worst, sums.worst())
            problem = sums.failure()
            if problem and self.finding is None:
                label = f"output {index}" if len(ref_before) > 1 else "the output"
                self.finding = f"{label} {problem}"
        return telling

    def failure(self) -> str | None:
        return self.finding


def _judged(c0: KeptOutput, c1: torch.Tensor, r0: KeptOutput,
            r1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int] | None:
    """One output's four answers as the response test judges them, with the size of its parts:
    whole, or, where the answers before were kept as a sample of parts, those parts of all four
    (the sample's parts keep their size, so each is judged as the part it was). None where the
    four are not laid out alike (an output whose shape changes with the input)."""
    if isinstance(r0, PartSample):
        if not isinstance(c0, PartSample) or c0.parts != r0.parts:
            return None
        c1_parts, r1_parts = r0.of(c1), r0.of(r1)
        if c1_parts is None or r1_parts is None:
            return None
        return c0.values, c1_parts, r0.values, r1_parts, r0.part_size
    if isinstance(c0, PartSample) or not all(t.shape == r0.shape and t.dtype == r0.dtype for t in (c0, c1, r1)):
        return None
    return c0, c1, r0, r1, part_size(r0.numel())


class _PartSums:
    _ERROR, _CHANGE, _SQUARES = range(3)  # per part: sums of the squared error, change, and b0^2 + b1^2

    def __init__(self, ref: torch.Tensor, size: int):
        self.dtype = ref.dtype
        self.numel = ref.numel()
        self.size = size
        self.count = -(-self.numel // self.size)
        self.sums = torch.zeros(3, self.count, dtype=torch.float64)
        self.honest = compare.honest_relative_error(ref.dtype)

    @classmethod
    def of(cls, ref: torch.Tensor, size: int) -> _PartSums | None:
        if not ref.is_floating_point() or ref.numel() == 0:
            return None
        return cls(ref, size)

    def add(self, c0: torch.Tensor, c1: torch.Tensor, r0: torch.Tensor, r1: torch.Tensor) -> None:
        flat = [t.reshape(-1) for t in (c0, c1, r0, r1)]
        work = torch.float64 if self.dtype == torch.float64 else torch.float32
        for start, end, first in compare.part_steps(self.numel, self.size):
            a0, a1, b0, b1 = (t[start:end].to(work) for t in flat)
            terms = _response_terms(a0, a1, b0, b1)
            if terms is None:  # NaN, an infinity, or a difference beyond the working precision's range
                terms = _response_terms_exact(a0.double(), a1.double(), b0.double(), b1.double())
            compare.add_to_parts(self.sums, terms, first, self.size)

    def _allowed(self) -> torch.Tensor:
        """Per part, how far the candidate's squared change may differ from the reference's."""
        return RESPONSE_RATIO ** 2 * self.sums[self._CHANGE] + self._floor()

    def moved(self) -> bool:
        """Whether the reference's output moved well beyond rounding in some part."""
        return bool((self.sums[self._CHANGE] > TELLING_MOVE ** 2 * self._floor()).any())

    def _floor(self) -> torch.Tensor:
        """Per part, honest code's rounding on both of the reference's answers (squared, summed)."""
        return self.sums[self._SQUARES] * self.honest ** 2

    def worst(self) -> float:
        error, allowed = self.sums[self._ERROR], self._allowed()
        ratios = torch.where(allowed > 0, error / allowed.clamp_min(1e-300), (error > 0).double() * math.inf)
        return float(ratios.max())

    def failure(self) -> str | None:
        error, change = self.sums[self._ERROR], self.sums[self._CHANGE]
        failing = error > self._allowed()
        if int(failing.sum()) <= FAILING_PARTS * self.count:
            return None
        rms = {name: math.sqrt(float(values[failing].sum()) / int(failing.sum()))
               for name, values in (("error", error), ("change", change))}
        where = "" if self.count == 1 else f" in {int(failing.sum())} of its {self.count} parts"
        return (f"does not move with its input{where}: with part of each input's elements changed, the "
                f"reference's output changed by {rms['change']:.3g} (root of the summed squares), and the candidate's "
                f"change differed from it by {rms['error']:.3g}, more than {RESPONSE_RATIO:g}x: an answer estimated "
                f"from part of the input, or from an aggregate the move leaves unchanged")


def _response_terms(a0: torch.Tensor, a1: torch.Tensor, b0: torch.Tensor, b1: torch.Tensor) -> torch.Tensor | None:
    """Per element of one step: the squared difference between the candidate's change (a1 - a0)
    and the reference's (b1 - b0), the reference's squared change, and b0^2 + b1^2; differences
    in the working precision (float32 rounds them far below the honest floor), squares in
    float64. None where a value is not finite, or a difference left float32's range: the exact
    path then."""
    change = b1 - b0
    values = torch.stack([(a1 - a0).sub_(change), change, b0, b1]).to(torch.float64).square_()
    values[2] += values[3]
    values = values[:3]
    return values if math.isfinite(float(values.sum())) else None


def _response_terms_exact(a0: torch.Tensor, a1: torch.Tensor, b0: torch.Tensor, b1: torch.Tensor) -> torch.Tensor:
    """The same in float64, an element counting for nothing where any of its four values is not
    finite (the full comparisons judge those)."""
    finite = torch.isfinite(a0) & torch.isfinite(a1) & torch.isfinite(b0) & torch.isfinite(b1)
    zero = torch.zeros((), dtype=torch.float64)
    change = torch.where(finite, b1 - b0, zero)
    error = torch.where(finite, (a1 - a0) - change, zero)
    squares = torch.where(finite, b0.square() + b1.square(), zero)
    return torch.stack([error.square(), change.square(), squares])

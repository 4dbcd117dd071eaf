"""Perturbed copies of an input set, for the every-element check (every_element.py).

The check runs both sides on an input set the candidate has already answered and on a copy of it
with part of its elements changed, and compares how the two outputs move. Here only the copy is
made, on the host (trusted code), from the bytes the reference worker packed, while the candidate
is frozen. Two kinds, each blind to what the program computes:

- `swapped`: in every tensor, pairs of elements a random distance apart trade places. A
  permutation: every aggregate of a tensor's values (its sum, its norm, its histogram) is
  unchanged, so a closed form built from such aggregates does not move while the reference does.
- `mixed`: in every tensor, elements are taken from another input set the reference made at the
  same places. The values keep the problem's distribution at every place, and the aggregates move
  as a fresh draw's do, so a closed form that puts a distribution's constant where the reference
  reads the sample's value misses the change.

In both, about a quarter of each tensor lies in regions left as they were (`_kept_regions`), and
about half of the rest changes; zeros stay zeros (a triangular or masked input keeps its
pattern), symmetric matrices stay symmetric, and Python scalars, shapes, dtypes and the nest's
layout are unchanged. Nothing in a copy tells a program that it is one. The cost is a few passes
over each tensor on the host.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from kernelopt.sandbox.records import InputSet
from kernelopt.sandbox.worker import transfer

REGIONS = 8  # a tensor is cut into this many regions, of which UNMOVED stay as they were
UNMOVED = 2


def swapped(input_set: InputSet, chooser: random.Random) -> InputSet:
    """A copy of `input_set` whose tensors' elements trade places in pairs (module docstring); its
    seed a fresh number from `chooser` (a call's seed names it, nothing more)."""
    generator = _generator(chooser)
    return _copy(input_set, chooser, lambda values: _swap_pairs(values, generator, chooser))


def alike(one: InputSet, other: InputSet) -> bool:
    """Whether two input sets are laid out alike (the same nest, shapes and dtypes)."""
    return other.spec == one.spec and len(other.packed) == len(one.packed)


def mixed(input_set: InputSet, other: InputSet, chooser: random.Random) -> InputSet:
    """A copy of `input_set` whose tensors take part of their elements from `other`'s at the same
    places; swapped instead where the two sets are not laid out alike."""
    if not alike(input_set, other):
        return swapped(input_set, chooser)
    generator = _generator(chooser)
    sources = iter(transfer.packed_tensors(other.spec, bytearray(other.packed)))
    return _copy(input_set, chooser, lambda values: _take_from(values, next(sources), generator, chooser))


def _generator(chooser: random.Random) -> torch.Generator:
    return torch.Generator().manual_seed(chooser.randrange(2**63))


def _copy(input_set: InputSet, chooser: random.Random, change: Callable[[torch.Tensor], None]) -> InputSet:
    """A copy of the set's bytes, `change` applied in place to each of its tensors (called for
    every tensor, so that `mixed` stays in step with the other set's)."""
    buffer = bytearray(input_set.packed)
    for tensor in transfer.packed_tensors(input_set.spec, buffer):
        symmetric = _symmetric(tensor)
        change(tensor)
        if symmetric:
            upper = tensor.triu()
            tensor.copy_(upper + upper.triu(1).mT)
    return InputSet(seed=chooser.randrange(1, 2**31 - 1), spec=input_set.spec,
                    packed=buffer)  # type: ignore[arg-type]  # bytes-like: a bytes() copy would double it


def _swap_pairs(values: torch.Tensor, generator: torch.Generator, chooser: random.Random) -> None:
    """Part of `values`' elements swapped in pairs, in place: the flattened tensor is cut into runs
    of a random length d, and each element of an even run trades places, with probability one
    half, with its partner d further on (neither in a kept region, both nonzero or both zero)."""
    if values.numel() < 2:
        return
    flat = values.reshape(-1)
    distance = chooser.randrange(1, max(1, flat.numel() // 4) + 1)
    pairs = flat.numel() // (2 * distance)
    runs = flat[: pairs * 2 * distance].view(pairs, 2, distance)
    first, second = runs[:, 0].clone(), runs[:, 1].clone()
    chosen = _chosen(first.shape, generator)
    kept = _kept_regions(flat.numel(), chooser)[: pairs * 2 * distance].view(pairs, 2, distance)
    chosen &= ~kept[:, 0] & ~kept[:, 1] & _same_zero_pattern(values.dtype, first, second)
    torch.where(chosen, second, first, out=runs[:, 0])
    torch.where(chosen, first, second, out=runs[:, 1])


def _take_from(values: torch.Tensor, source: torch.Tensor, generator: torch.Generator,
               chooser: random.Random) -> None:
    """Part of `values`' elements taken from `source` at the same places, in place."""
    if values.numel() < 2:
        return
    flat, other = values.reshape(-1), source.reshape(-1)
    chosen = _chosen(flat.shape, generator) & ~_kept_regions(flat.numel(), chooser)
    chosen &= _same_zero_pattern(values.dtype, flat, other)
    flat.copy_(torch.where(chosen, other, flat))


def _chosen(shape, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=generator, dtype=torch.bool)


def _same_zero_pattern(dtype: torch.dtype, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | bool:
    """Where a change keeps every zero where it was and every nonzero nonzero."""
    if dtype == torch.bool:
        return True
    return (a != 0) == (b != 0)


def _kept_regions(numel: int, chooser: random.Random) -> torch.Tensor:
    """Per element, whether it lies in one of the regions left unmoved (chosen at random). Where an
    output depends only on them the reference's does not move, and an answer that scales every
    element by an estimated aggregate (a norm from a subsample) moves there by its estimate's
    change alone."""
    kept = torch.zeros(numel, dtype=torch.bool)
    if numel < 2 * REGIONS:
        return kept
    size = -(-numel // REGIONS)
    for region in chooser.sample(range(REGIONS), UNMOVED):
        kept[region * size:(region + 1) * size] = True
    return kept


def _symmetric(values: torch.Tensor) -> bool:
    return values.dim() >= 2 and values.shape[-1] == values.shape[-2] and values.shape[-1] > 1 and \
        bool(torch.equal(values, values.mT))

"""A perturbed copy of an input set: the same values, about half of each tensor's elements moved.

The every-element check (every_element.py) runs both sides on an input set the candidate has
already answered and on this copy of it, and compares how the two outputs move. Here only the
copy is made, on the host (trusted code), from the bytes the reference worker packed, while the
candidate is frozen:

- in every tensor input of two or more elements, about half of the elements trade places in
  pairs a random distance apart (`_moved`): the same values in other places, so the copy is as
  likely an input as the original (its distribution, its range, its dtype, every aggregate of
  its values), and nothing in it tells a program that it is a copy;
- zeros stay zeros and nonzeros stay nonzeros (a triangular or masked input keeps its pattern);
- a tensor whose last two dimensions hold symmetric matrices stays symmetric;
- Python scalars, and the shapes, dtypes and layout of the nest, are unchanged.

About a quarter of a tensor's elements lies in regions left unmoved (`_kept_regions`), and about
half of the rest moves. It costs a few passes over each tensor, on the host.
"""

from __future__ import annotations

import random

import torch

from kernelopt.sandbox.records import InputSet
from kernelopt.sandbox.worker import transfer


def perturbed(input_set: InputSet, chooser: random.Random) -> InputSet:
    """A copy of `input_set` with about half of each tensor's elements replaced as the module
    docstring says; its seed a fresh number from `chooser` (a call's seed names it, nothing more)."""
    buffer = bytearray(input_set.packed)
    generator = torch.Generator().manual_seed(chooser.randrange(2**63))
    for tensor in _tensor_views(input_set.spec, buffer):
        if tensor.numel() >= 2:
            tensor.copy_(_moved(tensor, generator, chooser))
    return InputSet(seed=chooser.randrange(1, 2**31 - 1), spec=input_set.spec, digest="perturbed",
                    packed=bytes(buffer))


def _tensor_views(spec, buffer: bytearray) -> list[torch.Tensor]:
    """Each tensor of the packed nest as a view of `buffer`, in its shape (the buffer holds every
    tensor's values contiguously, whatever layout the worker gives it: transfer.py)."""
    if not isinstance(spec, dict) or len(spec) != 1:
        raise transfer.TransferError("malformed input spec")
    (kind, value), = spec.items()
    if kind in ("list", "tuple"):
        return [t for item in value for t in _tensor_views(item, buffer)]
    if kind != "tensor" or not value.get("nbytes"):
        return []
    dtype = transfer.dtype_named(value["dtype"])
    flat = torch.frombuffer(buffer, dtype=torch.uint8, count=value["nbytes"], offset=value["offset"]).view(dtype)
    return [flat.reshape(value["shape"])]


def _moved(values: torch.Tensor, generator: torch.Generator, chooser: random.Random) -> torch.Tensor:
    """`values` with about a third of its elements swapped in pairs: the flattened tensor is cut
    into runs of a random length d, and each element of an even run trades places, with
    probability one half, with its partner d further on. A permutation, so every aggregate of
    the tensor's values (its sum, its norm, its histogram) is unchanged."""
    flat = values.reshape(-1).clone()
    distance = chooser.randrange(1, max(1, flat.numel() // 4) + 1)
    pairs = flat.numel() // (2 * distance)
    runs = flat[: pairs * 2 * distance].view(pairs, 2, distance)
    first, second = runs[:, 0].clone(), runs[:, 1].clone()
    chosen = torch.randint(0, 2, first.shape, generator=generator, dtype=torch.bool)
    # Some regions of the tensor stay as they were: where an output depends only on them, the
    # reference's does not move, and an answer that scales every element by an estimated
    # aggregate (a norm from a subsample) moves there by its estimate's change alone.
    kept = _kept_regions(flat.numel(), chooser)
    index = torch.arange(pairs * 2 * distance).view(pairs, 2, distance)
    chosen &= ~kept[index[:, 0]] & ~kept[index[:, 1]]
    if values.dtype != torch.bool:
        # Only nonzeros trade places, so every zero stays where it was (a triangular input stays so).
        chosen &= (first != 0) & (second != 0)
    runs[:, 0] = torch.where(chosen, second, first)
    runs[:, 1] = torch.where(chosen, first, second)
    moved = flat.reshape(values.shape)
    if _symmetric(values):
        upper = moved.triu()
        moved = upper + upper.triu(1).mT
    return moved


REGIONS = 8  # a tensor is cut into this many regions, of which UNMOVED stay as they were
UNMOVED = 2


def _kept_regions(numel: int, chooser: random.Random) -> torch.Tensor:
    """Per element, whether it lies in one of the regions left unmoved (chosen at random)."""
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

"""Fingerprints of a call's outputs, taken by the host from the values it read: cheap summaries
that problem health compares between runs of the reference (sandbox/problem_health.py) and
keeps with its records. The host compares candidates with the reference in full
(sandbox/compare.py); a fingerprint is for what is kept or compared later, not for a verdict
on a candidate."""

from __future__ import annotations

import math

import torch


class Fingerprinter:
    """Cheap summaries of an output that the host compares against the reference's.

    Per tensor: "sums" = [sum, sum |x|, sum x^2, sum w*x with a secret +-1 pattern w, and the
    counts of NaN, +inf, -inf], plus "blocks" and "block_abs": sum and sum |x| over up to
    MAX_BLOCKS contiguous blocks. A wrong output cannot match them within tolerance without
    computing the right values; block sums also catch permuted or partly computed outputs.
    Non-finite values count in the counts and as 0 in the sums.
    """

    MAX_BLOCKS = 1024

    def __init__(self, secret_seed: int):
        self.secret_seed = secret_seed
        self._weights: dict[tuple[int, str], torch.Tensor] = {}

    def __call__(self, t: torch.Tensor) -> dict:
        x = t.detach().reshape(-1)
        if x.is_complex():
            x = torch.view_as_real(x).reshape(-1)
        x = x.to(torch.float64)
        w = self._weights_for(x.numel(), x.device)
        sums, blocks, block_abs = _summaries(x, w, self.MAX_BLOCKS)
        specials = [0.0, 0.0, 0.0]
        if not all(map(math.isfinite, sums)):  # NaN/inf somewhere (a full isfinite pass is costly)
            specials = [float(torch.isnan(x).sum()), float(torch.isposinf(x).sum()),
                        float(torch.isneginf(x).sum())]
            x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
            sums, blocks, block_abs = _summaries(x, w, self.MAX_BLOCKS)
        return {"sums": sums + specials, "blocks": blocks, "block_abs": block_abs}

    def _weights_for(self, numel: int, device: torch.device) -> torch.Tensor:
        key = (numel, str(device))
        if key not in self._weights:
            generator = torch.Generator(device="cpu").manual_seed(self.secret_seed)
            signs = torch.randint(0, 2, (numel,), generator=generator, dtype=torch.int8) * 2 - 1
            self._weights[key] = signs.to(device=device, dtype=torch.float64)
        return self._weights[key]


def block_layout(numel: int, max_blocks: int) -> tuple[int, int]:
    """(number of blocks, elements per block) for an output of numel elements."""
    if numel == 0:
        return 0, 0
    count = min(max_blocks, numel)
    size = -(-numel // count)
    return -(-numel // size), size


def _summaries(x: torch.Tensor, w: torch.Tensor, max_blocks: int) -> tuple[list[float], list[float], list[float]]:
    """([sum, sum |x|, sum x^2, sum w*x], block sums, block sums of |x|) of a flat float64
    tensor. The totals are summed from the blocks, and everything leaves the device in one
    transfer: a fingerprint costs a few passes over the output, not one per number."""
    count, size = block_layout(x.numel(), max_blocks)
    if count == 0:
        return [0.0, 0.0, 0.0, 0.0], [], []
    padded = x if count * size == x.numel() else torch.nn.functional.pad(x, (0, count * size - x.numel()))
    grid = padded.view(count, size)
    blocks, block_abs = grid.sum(dim=1), torch.linalg.vector_norm(grid, 1, dim=1)
    totals = torch.stack([blocks.sum(), block_abs.sum(), torch.dot(x, x), torch.dot(x, w)])
    values = torch.cat([totals, blocks, block_abs]).tolist()
    return values[:4], values[4:4 + count], values[4 + count:]

"""The reference worker's outbox (kernelopt/sandbox/outbox.py): input sets packed into shared
memory of the host's instead of crossing the reply pipe."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest
import torch

from kernelopt.kernelbench import ProblemError, load_problem
from kernelopt.sandbox import evaluate, outbox
from kernelopt.sandbox.conversation import Conversation
from kernelopt.sandbox.records import input_sets
from kernelopt.sandbox.worker import transfer


def _write(box: outbox.Outbox, at: int, data: bytes) -> None:
    """Write into the outbox as the reference worker does: through a mapping of its descriptor."""
    with mmap.mmap(box.fd, box.size) as mapping:
        mapping[at:at + len(data)] = data


def test_a_set_is_copied_out_from_inside_the_outbox_only():
    box = outbox.Outbox(4096)
    try:
        _write(box, 64, b"abc" * 10)
        taken = box.take(64, 30)
        assert taken == b"abc" * 10
        _write(box, 64, bytes(30))  # the next request writes over it: the host's copy stays
        assert taken == b"abc" * 10
        for at, nbytes in ((4000, 200), (-1, 10), (0, -5), ("0", 10), (0, None), (4096, 1)):
            assert box.take(at, nbytes) is None
        assert box.take(4096, 0) == b""
    finally:
        box.close()


def test_the_outbox_cannot_be_resized_behind_the_hosts_back():
    box = outbox.Outbox(1 << 16)
    try:
        for size in (1 << 12, 1 << 20):
            with pytest.raises(PermissionError):
                os.ftruncate(box.fd, size)
        assert box.take(0, 1 << 16) == bytes(1 << 16)
    finally:
        box.close()


def test_input_sets_come_from_the_outbox_and_the_blobs_in_order(example):
    problem = load_problem(example("1_ReLU"))
    specs = []
    packs = []
    for value in (1.0, 2.0, 3.0):
        spec, packed = transfer.pack([torch.full((8,), value)])
        specs.append(spec)
        packs.append(bytes(packed))
    box = outbox.Outbox(4096)
    try:
        _write(box, 128, packs[1])
        reply = {"sets": [{"spec": specs[0]}, {"spec": specs[1], "at": 128, "nbytes": len(packs[1])},
                          {"spec": specs[2]}]}
        sets = input_sets(problem, [11, 12, 13], reply, [packs[0], packs[2]], box.take)
        assert [s.seed for s in sets] == [11, 12, 13]
        assert [bytes(s.packed) for s in sets] == packs
        outside = {"sets": [{"spec": specs[1], "at": 4090, "nbytes": len(packs[1])}]}
        with pytest.raises(ProblemError, match="outside its outbox"):
            input_sets(problem, [12], outside, [], box.take)
        with pytest.raises(ProblemError, match="outside its outbox"):
            input_sets(problem, [12], reply | {"sets": reply["sets"][1:2]}, [], None)
        with pytest.raises(ProblemError, match="more input sets"):
            input_sets(problem, [11], {"sets": [{"spec": specs[0]}]}, [packs[0], packs[2]], box.take)
    finally:
        box.close()


def test_an_evaluation_takes_its_sets_through_the_outbox_and_the_worker_keeps_none_mapped(
        example, fast_options, monkeypatch):
    """Past the first request (whose sets size the outbox) every set comes through the outbox,
    the verdict is unchanged, and between requests the reference worker holds no mapping of it."""
    taken: list[int] = []
    original_take = outbox.Outbox.take
    monkeypatch.setattr(outbox.Outbox, "take",
                        lambda self, at, nbytes: taken.append(nbytes) or original_take(self, at, nbytes))
    mapped_after: list[bool] = []
    original_make = Conversation.make_inputs

    def make_inputs(self, seeds):
        sets = original_make(self, seeds)
        mapped_after.append(any(_maps_outbox(pid) for pid in self.reference.contained.members()))
        return sets

    monkeypatch.setattr(Conversation, "make_inputs", make_inputs)
    path = example("1_ReLU")
    result = evaluate(load_problem(path), _exact_copy(path), fast_options())
    assert result.status == "correct", result.message
    assert len(taken) >= 5 and len(set(taken)) == 1  # every set of a problem is the same size
    assert mapped_after and not any(mapped_after)


def _exact_copy(path: Path) -> str:
    return path.read_text().replace("class Model(", "class ModelNew(").replace("super(Model,", "super(ModelNew,")


def _maps_outbox(pid: int) -> bool:
    try:
        return "kernelopt-reference-outbox" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False

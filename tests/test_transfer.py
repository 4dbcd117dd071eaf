"""How inputs cross from the reference worker to both workers, and how outputs' structure is
told: kernelopt/sandbox/worker/transfer.py, and the host's input slot (input_files.InputSlot)."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from kernelopt.sandbox.input_files import InputSlot
from kernelopt.sandbox.worker import transfer

CPU = torch.device("cpu")


def _round_trip(inputs):
    spec, packed = transfer.pack(inputs)
    return transfer.unpack(spec, bytearray(packed), CPU)


def test_tensors_scalars_and_nesting_come_back_exactly():
    inputs = [torch.randn(3, 5), 7, 2.5, None, "mean", True,
              (torch.arange(6, dtype=torch.int64).reshape(2, 3), [torch.rand(4) > 0.5]),
              torch.randn(2, 2, dtype=torch.float64), torch.randn(8).to(torch.bfloat16),
              torch.randn(3, dtype=torch.complex64), torch.empty(0, 4)]
    back = _round_trip(inputs)
    assert type(back) is list and len(back) == len(inputs)
    assert back[1:6] == [7, 2.5, None, "mean", True]
    assert type(back[6]) is tuple and type(back[6][1]) is list
    for got, want in [(back[0], inputs[0]), (back[6][0], inputs[6][0]), (back[6][1][0], inputs[6][1][0]),
                      (back[7], inputs[7]), (back[8], inputs[8]), (back[9], inputs[9]), (back[10], inputs[10])]:
        assert type(got) is torch.Tensor and got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


def test_a_dense_permuted_layout_keeps_its_strides_and_other_layouts_their_values():
    transposed = torch.randn(64, 32).t()  # a dense layout that is not contiguous
    expanded = torch.randn(1, 5).expand(4, 5)  # stride 0: not dense, values kept
    back_t, back_e = _round_trip([transposed, expanded])
    assert back_t.stride() == transposed.stride() and torch.equal(back_t, transposed)
    assert torch.equal(back_e, expanded)


def test_a_contiguous_cpu_input_is_a_view_of_the_buffer_and_each_unpack_is_its_own():
    spec, packed = transfer.pack([torch.randn(4, 4)])
    buffer = bytearray(packed)
    first = transfer.unpack(spec, buffer, CPU)[0]
    buffer[:4] = bytes(4)  # the host writes the next call's inputs into the same place
    assert first[0, 0].item() == 0.0
    second = transfer.unpack(spec, bytearray(packed), CPU)[0]
    assert second.data_ptr() != first.data_ptr()


@pytest.mark.parametrize("make", [lambda: torch.randn(64, 32).t(), lambda: torch.randn(2, 3, 4, 5).permute(0, 2, 3, 1),
                                  lambda: torch.randn(1, 6, 1, 7)[:, :, :, :].transpose(1, 3)])
def test_a_dense_layout_is_a_view_of_the_buffer_with_its_strides(make):
    """A transpose or channels-last input travels in its memory order and comes out as a view of
    the slot: no copy into its layout inside the window, a step a program could skip."""
    x = make()
    spec, packed = transfer.pack([x])
    buffer = bytearray(packed)
    back = transfer.unpack(spec, buffer, CPU)[0]
    assert back.stride() == x.stride() and torch.equal(back, x)
    start = torch.frombuffer(buffer, dtype=torch.uint8).data_ptr()
    assert start <= back.data_ptr() < start + len(buffer)  # a view, not a copy
    buffer[:] = bytes(len(buffer))  # the host writes the next call's inputs into the same place
    assert back.abs().sum().item() == 0.0
    # The every-element check's view of the same values: contiguous, every element once.
    [values] = transfer.packed_tensors(spec, bytearray(packed))
    assert values.is_contiguous() and torch.equal(values.reshape(-1).sort().values, x.reshape(-1).sort().values)


def test_requires_grad_travels():
    back = _round_trip([torch.randn(3, requires_grad=True)])
    assert back[0].requires_grad


@pytest.mark.parametrize("value", [object(), {"a": torch.ones(1)}, torch.ones(2, dtype=torch.float8_e4m3fn)
                                   if hasattr(torch, "float8_e4m3fn") else object()])
def test_inputs_that_cannot_be_packed_say_why(value):
    with pytest.raises(transfer.TransferError, match="inputs must be|not supported"):
        transfer.pack([value])


@pytest.mark.parametrize("spec", [
    {"tensor": {"offset": 0, "nbytes": 1 << 20, "dtype": "torch.float32", "shape": [1 << 18], "stride": None}},
    {"tensor": {"offset": -8, "nbytes": 8, "dtype": "torch.float32", "shape": [2], "stride": None}},
    {"tensor": {"offset": 0, "nbytes": 8, "dtype": "torch.strange", "shape": [2], "stride": None}},
    {"value": {"not": "a scalar"}}, {"mystery": 1}, [1, 2], {"list": [], "tuple": []},
])
def test_a_spec_that_does_not_fit_its_buffer_is_refused(spec):
    with pytest.raises((transfer.TransferError, RuntimeError)):
        transfer.unpack(spec, bytearray(64), CPU)


@pytest.mark.parametrize("output, expected", [
    (torch.ones(1), "T"), ((torch.ones(1), torch.ones(1)), "(T,T)"), ([torch.ones(1)], "[T]"),
    ([[torch.ones(1)]], "[[T]]"), ((torch.ones(1), [torch.ones(1)]), "(T,[T])"), (3, "?int"),
])
def test_structure_tells_tensor_tuple_list_and_nesting_apart(output, expected):
    assert transfer.structure(output) == expected


def test_the_input_slot_cannot_be_resized_by_whoever_holds_it():
    # A candidate that truncated the slot would make the host's next write fault (SIGBUS).
    slot = InputSlot("test", size=1 << 20)
    try:
        for size in (0, 1 << 19, 2 << 20):
            with pytest.raises(OSError) as raised:
                os.ftruncate(slot.fd, size)
            assert raised.value.errno == errno.EPERM
        assert slot.put(b"abc", at=64) and bytes(slot._map[64:67]) == b"abc"
        assert not slot.put(b"x" * 16, at=(1 << 20) - 8)
    finally:
        slot.close()


def test_a_layout_is_contiguous_exactly_where_torch_says_so():
    """Against torch's own is_contiguous, for random small layouts (zero strides, gaps,
    permutations, dims of one element) and a few named ones."""
    import random

    named = [torch.empty(4, 6), torch.empty(4, 6).t(), torch.empty(8, 6)[:, :3], torch.empty(1, 6).expand(5, 6),
             torch.empty(10).unfold(0, 4, 1), torch.empty(1, 1, 6), torch.empty(0, 3), torch.empty(4, 6)[:, :0],
             torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)]
    chooser = random.Random(3)
    drawn = []
    for _ in range(3000):
        dims = chooser.randint(1, 3)
        shape = [chooser.randint(0, 4) for _ in range(dims)]
        drawn.append(torch.empty(256).as_strided(shape, [chooser.randint(0, 9) for _ in range(dims)]))
    for t in named + drawn:
        assert transfer.contiguous_layout(list(t.shape), list(t.stride())) is t.is_contiguous(), (t.shape, t.stride())
    assert not transfer.contiguous_layout([4, 4], [1])  # a stride missing

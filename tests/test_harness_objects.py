"""The worker's checks that everything the harness copies, hashes, fingerprints or serializes is
a plain, dense tensor it made or checked (worker/measure.py), and the kept copies' bytes."""

import io

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelopt.sandbox.worker import turns as worker_turns
from kernelopt.sandbox.worker import measure


class _Sub(torch.Tensor):
    pass


class _Wrapper(torch.Tensor):
    @staticmethod
    def __new__(cls, like):
        return torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype, device=like.device)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise AssertionError(f"the harness ran {func} on a wrapper")


def _class_reassigned():
    t = torch.ones(3)
    t.__class__ = _Sub
    return t


@pytest.mark.parametrize("make, words", [
    (lambda: torch.ones(3).as_subclass(_Sub), "_Sub (a torch.Tensor subclass)"),
    (_class_reassigned, "_Sub"),
    (lambda: _Wrapper(torch.ones(3)), "_Wrapper"),
    (lambda: torch.nn.Parameter(torch.ones(3)), "Parameter"),
    (lambda: torch.ones(3).to_sparse(), "sparse"),
    (lambda: torch.empty(3, device="meta"), "meta tensor"),
    (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "nested"),
    (lambda: [1, (torch.ones(2), object())], "object"),
])
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_anything_but_a_plain_dense_tensor_is_refused_before_it_is_touched(make, words):
    with pytest.raises(measure.HarnessObjectError, match="the call's inputs holds") as raised:
        measure.check_plain(make(), "the call's inputs")
    assert words in str(raised.value)


def test_plain_nests_of_tensors_and_scalars_pass():
    measure.check_plain([torch.ones(2, 3), (torch.zeros(()), 3, 2.5, True, None, "s"), []], "inputs")
    measure.check_plain(torch.ones(4).t(), "inputs")  # a non-contiguous plain tensor is still plain


def test_a_plain_type_carrying_the_python_dispatch_key_is_refused():
    class Sneaky(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    t = torch.Tensor._make_subclass(Sneaky, torch.ones(3))
    t.__class__ = torch.Tensor  # the type reads plain; the tensor still dispatches to Python
    assert type(t) is torch.Tensor
    assert measure.not_plain(t) == "a tensor that dispatches to Python"


def test_outputs_must_be_dense_too():
    with pytest.raises(measure.OutputError, match="sparse"):
        measure.flatten_outputs((torch.ones(2), torch.ones(2).to_sparse()))


def test_fingerprint_weight_cache_replaced_by_a_dict_subclass_is_refused():
    fingerprint = measure.Fingerprinter(7)
    fingerprint(torch.ones(8))
    calls = []

    class Spy(dict):
        def __contains__(self, key):
            calls.append(key)
            return dict.__contains__(self, key)

    fingerprint._weights = Spy(fingerprint._weights)
    with pytest.raises(measure.HarnessObjectError, match="weight cache"):
        fingerprint(torch.ones(8))
    assert calls == []  # refused before the program's object ran


def test_fingerprint_weight_replaced_by_a_wrapper_is_refused():
    fingerprint = measure.Fingerprinter(7)
    fingerprint(torch.ones(8))
    key = next(iter(fingerprint._weights))
    fingerprint._weights[key] = _Wrapper(fingerprint._weights[key])
    with pytest.raises(measure.HarnessObjectError, match="_Wrapper"):
        fingerprint(torch.ones(8))


@pytest.mark.parametrize("tensors", [
    [torch.randn(3, 5)],
    [torch.randn(7).to(torch.bfloat16), torch.tensor(2.5), torch.arange(6).reshape(2, 3) > 2],
    [torch.randn(4, dtype=torch.complex64), torch.empty(0, 3)],
])
def test_a_snapshot_fetches_exactly_the_values_it_took(tensors):
    before = [t.clone() for t in tensors]
    kept, taken = measure.copy_outputs(tensors)
    assert all(type(k) is torch.Tensor and torch.equal(k, b) for k, b in zip(kept, before))
    for t in tensors:
        t.zero_()  # what the program does to the copies later does not reach what is fetched
    loaded = torch.load(io.BytesIO(measure.serialize_snapshot(taken)), weights_only=True)
    assert [type(t) for t in loaded] == [torch.Tensor] * len(tensors)
    for got, expected in zip(loaded, before):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert torch.equal(got, expected)


@pytest.mark.parametrize("forged", [
    [(str(torch.float32), (2,), b"\0" * 8)],  # a list, not the snapshot's tuple
    ((str(torch.float32), (2,), bytearray(8)),),  # mutable bytes
    (("torch.float32", (2,), _Wrapper(torch.ones(2))),),
    (("not a dtype", (2,), b"\0" * 8),),
])
def test_a_replaced_snapshot_is_refused(forged):
    with pytest.raises(measure.HarnessObjectError):
        measure.serialize_snapshot(forged)


def test_harness_steps_run_no_dispatch_mode():
    seen = []

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    a, b = torch.ones(3), torch.empty(3)
    with Mode():
        with worker_turns.harness_only():
            b.copy_(a)
            kept, _ = measure.copy_outputs([a])
    assert seen == [] and torch.equal(b, a)

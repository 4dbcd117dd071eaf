"""Device slots: a trusted keeper places each call's inputs and takes its outputs while the worker
is frozen (sandbox/device_slots.py, worker/keeper.py, worker/device_memory.py).

On a machine without a GPU the same protocol runs with shared memory in place of device memory
(KERNELOPT_DEVICE_SLOTS=host): the keeper process, the descriptors passed to the sandboxed
worker, the placement, the take that ends the window and the check of the inputs are the code a
GPU runs; only the allocator differs. The `gpu` tests run the CUDA allocator itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, device_slots, evaluate
from kernelopt.sandbox.process import InputSlot
from kernelopt.sandbox.worker import commands, device_memory, transfer

REPO = Path(__file__).resolve().parents[1]
RELU = REPO / "examples" / "level1" / "1_ReLU.py"
HACKS = REPO / "tests" / "adversarial" / "hacks"
EXACT_RELU = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


def test_a_host_slot_is_one_memory_in_both_mappings():
    mine, fd = device_memory.allocate(device_memory.HOST, 1000)
    theirs = device_memory.open_slot(device_memory.HOST, fd, mine.size)  # closes fd, as a worker does
    assert mine.size == device_memory.rounded(device_memory.HOST, 1000) >= 1000
    mine.tensor()[:4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    assert theirs.tensor()[:4].tolist() == [1, 2, 3, 4]
    mine.close()
    theirs.close()


def test_a_descriptor_for_less_than_the_slot_says_so():
    _, fd = device_memory.allocate(device_memory.HOST, 10)
    with pytest.raises(device_memory.DeviceMemoryError, match="host slot of"):
        device_memory.open_slot(device_memory.HOST, fd, 1 << 40)


@pytest.mark.parametrize("mode, device, backend, expected", [
    ("", "cuda:0", "bubblewrap", device_memory.CUDA), ("", "cpu", "bubblewrap", None),
    ("off", "cuda", "unshare", None), ("", "cuda", "docker", None), ("host", "cpu", "none", device_memory.HOST),
])
def test_which_evaluations_use_slots(monkeypatch, mode, device, backend, expected):
    monkeypatch.setenv(device_slots.MODE_VARIABLE, mode)
    assert device_slots.slots_kind(device, backend) == expected


def test_unpack_over_a_device_slot_gives_views_of_it_and_copies_for_other_layouts():
    packed_from = [torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.arange(6.0).reshape(3, 2).t(), 7]
    spec, buffer = transfer.pack(packed_from)
    slot = torch.zeros(len(buffer) + 64, dtype=torch.uint8)
    slot[:len(buffer)] = torch.frombuffer(buffer, dtype=torch.uint8)
    contiguous, permuted, scalar = transfer.unpack(spec, slot, torch.device("cpu"))
    assert torch.equal(contiguous, packed_from[0]) and torch.equal(permuted, packed_from[1]) and scalar == 7
    assert contiguous.untyped_storage().data_ptr() == slot.untyped_storage().data_ptr()  # a view
    assert permuted.stride() == packed_from[1].stride()


@pytest.fixture
def keeper():
    started = device_slots.Keeper(device_memory.HOST, "cpu")
    yield started
    started.close()


def test_the_keeper_places_inputs_takes_outputs_and_sees_inputs_written(keeper):
    host_inputs = InputSlot("reference", size=8 << 20)
    slots = device_slots.WorkerSlots(keeper, host_inputs.fd, host_inputs.size)
    packed, at = bytes(range(256)) * 40, 4096
    assert host_inputs.put(packed, at)
    slots.outputs_wanted = 1000
    assert slots.stale(at + len(packed))
    message, fds = slots.remake(at + len(packed))
    assert message == commands.slots(device_memory.HOST, slots.inputs_size, slots.outputs_size, 0)
    assert not slots.stale(at + len(packed)) and slots.outputs_size >= 1000
    worker_inputs, worker_outputs = (device_memory.open_slot(device_memory.HOST, fd, size)
                                     for fd, size in zip(fds, (slots.inputs_size, slots.outputs_size)))

    slots.place(at, len(packed))
    assert bytes(worker_inputs.tensor()[at:at + len(packed)].numpy()) == packed

    worker_outputs.tensor()[:100] = 5
    worker_outputs.tensor()[512:562] = 9
    before = time.perf_counter()
    taken_at, held = slots.take([(0, 100), (512, 50)], (at, len(packed)))
    assert before < taken_at < time.perf_counter()  # the host's own clock: where the window ends
    assert held is True
    assert bytes(slots.output_bytes(150)) == bytes([5] * 100 + [9] * 50)

    worker_inputs.tensor()[at + 7] += 1  # a call that wrote into its inputs
    assert slots.take([(0, 100)], (at, len(packed)))[1] is False
    assert slots.take([(0, 100)], None)[1] is None
    for mapping in (worker_inputs, worker_outputs):
        mapping.close()
    slots.close()
    host_inputs.close()


def test_a_failing_keeper_step_is_an_error_of_the_keeper_not_a_hang(keeper):
    with pytest.raises(device_slots.KeeperError, match="place failed"):
        keeper.request({"cmd": "place", "slot": "none", "source": "none", "at": 0, "size": 1})


def _judge(source: str, **options):
    return evaluate(load_problem(RELU), source, EvalOptions(timing_budget=1.0, **options))


def test_an_exact_copy_is_judged_through_the_slots(monkeypatch):
    monkeypatch.setenv(device_slots.MODE_VARIABLE, "host")
    result = _judge(EXACT_RELU)
    assert result.status == "correct", result.message
    assert "device slots" in result.timing.method
    assert 0.5 < result.speedup < 2.0


def test_without_slots_the_method_says_how_outputs_travelled(monkeypatch):
    monkeypatch.setenv(device_slots.MODE_VARIABLE, "off")
    result = _judge(EXACT_RELU)
    assert result.status == "correct", result.message
    assert "device slots" not in result.timing.method and "frozen worker's memory" in result.timing.method


def test_a_worker_that_cannot_map_its_slots_goes_without_and_both_sides_travel_alike(monkeypatch):
    """A driver or sandbox that cannot share device memory: the first mapping fails before any
    program code runs, and the evaluation takes both sides' outputs another way."""
    monkeypatch.setenv(device_slots.MODE_VARIABLE, "host")
    remake = device_slots.WorkerSlots.remake

    def unmappable(self, input_bytes):
        message, fds = remake(self, input_bytes)
        return {**message, "kind": device_memory.CUDA}, fds  # this machine has no CUDA driver to map them

    monkeypatch.setattr(device_slots.WorkerSlots, "remake", unmappable)
    result = _judge(EXACT_RELU)
    assert result.status == "correct", result.message
    assert "device slots" not in result.timing.method


def test_writing_into_the_inputs_in_the_device_slot_is_caught(monkeypatch):
    monkeypatch.setenv(device_slots.MODE_VARIABLE, "host")
    result = _judge((HACKS / "mutate_input_inplace.py").read_text())
    assert result.status == "rejected" and "input_mutation" in result.flags, result.message


WIDENING = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.repeat(1, 4), x.sum(dim=1)


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []
"""


def test_outputs_larger_than_the_slot_come_in_the_answer_and_size_the_next_slot(monkeypatch, tmp_path):
    """Each worker's first slot is sized for its inputs (1 MiB here) and holds 2 MiB of outputs;
    these are 4 MiB, so the first call's come in the answer and the slot is remade to fit them."""
    monkeypatch.setenv(device_slots.MODE_VARIABLE, "host")
    problem = tmp_path / "widening.py"
    problem.write_text(WIDENING)
    candidate = WIDENING.replace("class Model(", "class ModelNew(")
    result = evaluate(load_problem(problem), candidate, EvalOptions(timing_budget=1.0))
    assert result.status == "correct", result.message
    assert "device slots" in result.timing.method


def test_a_lie_about_where_the_outputs_are_costs_the_candidate(monkeypatch):
    """The answer's spans are the program's word: spans outside the slot are unusable outputs,
    spans at the wrong place give wrong values; neither reaches the keeper as a request it fails."""
    monkeypatch.setenv(device_slots.MODE_VARIABLE, "host")
    lying = EXACT_RELU + textwrap.dedent("""
        import sys
        _measure = sys.modules["worker.measure"]
        _real = _measure.describe_outputs

        def _lie(output, inputs, transport, slot=None):
            described, blobs = _real(output, inputs, transport, slot)
            if "slot_spans" in described:
                described["slot_spans"] = [[1 << 40, n] for _, n in described["slot_spans"]]
            return described, blobs

        _measure.describe_outputs = _lie
    """)
    result = _judge(lying)
    assert result.status in ("rejected", "incorrect"), result.message
    assert "keeper" not in result.message


@pytest.mark.gpu
def test_a_cuda_slot_exported_by_one_process_is_mapped_by_another():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.cuda.init()
    mine, fd = device_memory.allocate(device_memory.CUDA, 1 << 20)
    mine.tensor()[:8] = torch.arange(8, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    child = textwrap.dedent(f"""
        import os, sys, torch
        sys.path.insert(0, {str(REPO / 'kernelopt' / 'sandbox')!r})
        from worker import device_memory
        torch.cuda.init()
        theirs = device_memory.open_slot("cuda", int(sys.argv[1]), {mine.size})
        print(theirs.tensor()[:8].tolist())
        theirs.tensor()[8] = 77
        torch.cuda.synchronize()
    """)
    done = subprocess.run([sys.executable, "-c", child, str(fd)], pass_fds=(fd,), capture_output=True, text=True,
                          timeout=120)
    os.close(fd)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(list(range(8)))
    assert int(mine.tensor()[8]) == 77
    mine.close()


@pytest.mark.gpu
def test_on_a_gpu_an_exact_copy_goes_through_the_slots_and_reads_one():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    result = evaluate(load_problem(RELU), EXACT_RELU, EvalOptions(device="cuda", timing_budget=2.0))
    assert result.status == "correct", result.message
    assert "device slots" in result.timing.method
    assert 0.8 < result.speedup < 1.25

"""Device slots: a trusted keeper places each call's inputs and takes its outputs while the worker
is frozen (sandbox/device_slots.py, sandbox/keeper.py, worker/device_memory.py).

On a machine without a GPU the same protocol runs with shared memory in place of device memory
(KERNELOPT_DEVICE_SLOTS=host): the keeper process, the descriptors passed to the sandboxed
worker, the placement, the take that ends the window and the check of the inputs are the code a
GPU runs; only the allocator differs. The `gpu` tests run the CUDA allocator itself."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import EvalOptions, device_slots, evaluate, rules
from kernelopt.sandbox.calls import OutputsUnreadable, _check_slot_spans
from kernelopt.sandbox.records import CallRecord, CallReply
from kernelopt.sandbox.input_files import InputSlot
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
    taken = slots.take([(0, 100), (512, 50)], (at, len(packed)))
    assert before < taken.at < time.perf_counter()  # the host's own clock: where the window ends
    assert taken.inputs_held is True and taken.comparison is None
    assert bytes(slots.output_bytes(150)) == bytes([5] * 100 + [9] * 50)

    worker_inputs.tensor()[at + 7] += 1  # a call that wrote into its inputs
    assert slots.take([(0, 100)], (at, len(packed))).inputs_held is False
    assert slots.take([(0, 100)], None).inputs_held is None
    for mapping in (worker_inputs, worker_outputs):
        mapping.close()
    slots.close()
    host_inputs.close()


class _SlottedWorker:
    """A worker's side of its slots, played by the test: outputs written straight into its
    device output slot, then taken by the keeper as a call's would be."""

    kind = device_memory.HOST

    def __init__(self, keeper):
        self.host_inputs = InputSlot("reference", size=1 << 20)
        self.slots = device_slots.WorkerSlots(keeper, self.host_inputs.fd, self.host_inputs.size)
        self.slots.outputs_wanted = 1 << 16
        _, fds = self.slots.remake(4096)
        self.mapped = [device_memory.open_slot(self.kind, fd, size)
                       for fd, size in zip(fds, (self.slots.inputs_size, self.slots.outputs_size))]

    def answer(self, outputs: list[torch.Tensor]):
        """Each output at a 4 KiB boundary of the output slot: (spans, layouts)."""
        spans, layouts = [], []
        for index, output in enumerate(outputs):
            raw = output.contiguous().view(-1).view(torch.uint8)
            self.mapped[1].tensor()[index * 4096:index * 4096 + raw.numel()] = raw
            spans.append((index * 4096, raw.numel()))
            layouts.append((list(output.shape), str(output.dtype)))
        return spans, tuple(layouts)

    def close(self):
        for mapping in self.mapped:
            mapping.close()
        self.slots.close()
        self.host_inputs.close()


def _outputs_pair(case: str):
    """(candidate outputs, reference outputs) of one kind of comparison."""
    generator = torch.Generator().manual_seed(5)
    ref = [torch.randn(300, generator=generator), torch.arange(7, dtype=torch.int64),
           torch.randn(2, 5, generator=generator).to(torch.float16)]
    cand = [t.clone() for t in ref]
    if case == "within tolerance":
        cand[0] += 1e-4
    elif case == "outside tolerance":
        cand[0][17] += 1.0
    elif case == "NaN where the reference has none":
        cand[0][3] = float("nan")
    elif case == "exact dtype differs":
        cand[1][2] += 1
    elif case == "shape differs":
        cand[2] = cand[2].reshape(5, 2)
    elif case == "an output missing":
        cand = cand[:2]
    return cand, ref


@pytest.mark.parametrize("case", ["equal", "within tolerance", "outside tolerance", "NaN where the reference has none",
                                  "exact dtype differs", "shape differs", "an output missing"])
@pytest.mark.parametrize("kept_side", ["reference", "candidate"])
def test_the_keeper_compares_kept_outputs_as_the_host_would(keeper, case, kept_side):
    """The timed rounds' comparison on the device: one side's outputs kept by the keeper, the
    other side's compared with them there, neither sent to the host; the verdict's numbers are
    exactly the host's own comparison of the same tensors (the same code: sandbox/compare.py)."""
    from dataclasses import asdict

    from kernelopt.sandbox.compare import Tolerances, compare_outputs

    cand, ref = _outputs_pair(case)
    options = EvalOptions()
    first, second = _SlottedWorker(keeper), _SlottedWorker(keeper)
    try:
        kept, taken = (ref, cand) if kept_side == "reference" else (cand, ref)
        spans, kept_layouts = first.answer(kept)
        sentinel = bytes([0xAB]) * 64
        first.slots.host_outputs.map[:64] = sentinel
        assert first.slots.take(spans, None, device_slots.OnDevice(keep="0")).comparison is None
        assert bytes(first.slots.host_outputs.map[:64]) == sentinel  # nothing sent to the host
        spans, layouts = second.answer(taken)
        compared = second.slots.take(spans, None, device_slots.OnDevice(
            compare_with="0", kept_side=kept_side, kept_layouts=kept_layouts, layouts=layouts,
            tolerances=Tolerances.of(options).to_json()))
        assert compared.comparison == asdict(compare_outputs(cand, ref, options))
        assert compared.comparison["passed"] == (case in ("equal", "within tolerance"))
    finally:
        first.close()
        second.close()


def test_kept_outputs_reach_the_host_when_they_cannot_be_compared_on_the_device(keeper):
    """The other side's outputs came in its answer (they did not fit its slot): the kept ones
    are brought to the host after all, as they were; a new round forgets what was kept."""
    worker = _SlottedWorker(keeper)
    try:
        outputs = [torch.randn(33), torch.arange(5, dtype=torch.int32)]
        spans, _ = worker.answer(outputs)
        worker.slots.take(spans, None, device_slots.OnDevice(keep="3"))
        size = sum(t.numel() * t.element_size() for t in outputs)
        worker.slots.give("3", size)
        back = bytes(worker.slots.output_bytes(size))
        assert back == b"".join(bytes(t.view(torch.uint8).numpy()) for t in outputs)
        keeper.forget()
        with pytest.raises(device_slots.KeeperError, match="give failed"):
            worker.slots.give("3", size)
    finally:
        worker.close()


def test_a_full_device_sends_the_outputs_to_the_host_rather_than_fail(monkeypatch):
    """No device memory to keep a side's outputs (a program that filled it, perhaps): the keeper
    sends them to the host as it would without a comparison on the device, and says so; the
    evaluation goes on with the host's comparison."""
    import socket

    from kernelopt.sandbox import keeper as keeper_module

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    keeper = keeper_module.Keeper(device_memory.HOST, 0, theirs)
    keeper.alloc({"name": "outputs", "size": 4096})
    _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    worker_view = device_memory.open_slot(device_memory.HOST, fds[0], 4096)
    host = device_slots.HostBuffer(4096)
    socket.send_fds(ours, [b"f"], [host.fd])
    keeper.share({"name": "host", "size": 4096})
    worker_view.tensor()[:8] = torch.arange(8, dtype=torch.uint8)

    def full(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch.Tensor, "clone", full)
    reply = keeper.take({"slot": "outputs", "spans": [[0, 8]], "dest": "host", "keep": "0", "to_host": False})
    monkeypatch.undo()
    assert reply["kept"] is False and "0" not in keeper.kept
    assert bytes(host.map[:8]) == bytes(range(8))
    for closable in (worker_view, host, ours, theirs):
        closable.close()


def test_the_window_ends_at_a_sample_and_outputs_written_after_it_are_seen(monkeypatch):
    """The keeper ends a window by reading a secret sample of the outputs' bytes; its copy of
    all of them comes just after, outside the window. Bytes written in between (work a program
    left running on the device past its answer) show as late writes; before the next window,
    the part of the output slot the outputs took holds poison, so an output not written at all
    by then reads as poison, not as the last call's values."""
    from kernelopt.sandbox import keeper as keeper_module

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    keeper = keeper_module.Keeper(device_memory.HOST, 0, theirs)
    views = {}
    for name in ("inputs", "outputs"):
        keeper.alloc({"name": name, "size": 1 << 16})
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
        views[name] = device_memory.open_slot(device_memory.HOST, fds[0], 1 << 16)
    shared = {name: device_slots.HostBuffer(1 << 16) for name in ("host-inputs", "host")}
    for name, buffer in shared.items():
        socket.send_fds(ours, [b"f"], [buffer.fd])
        keeper.share({"name": name, "size": 1 << 16})
    spans = [[0, 3000], [4096, 5000]]
    outputs = views["outputs"].tensor()
    outputs[:3000], outputs[4096:9096] = 7, 9
    assert keeper.take({"slot": "outputs", "spans": spans, "dest": "host"})["late_writes"] == 0
    assert bytes(shared["host"].map[:8000]) == bytes([7] * 3000 + [9] * 5000)

    keeper.place({"slot": "inputs", "source": "host-inputs", "at": 0, "size": 64, "poison": "outputs"})
    assert bool((outputs[:9096] == keeper_module.POISON).all()) and int(outputs[9096]) == 0

    original_wait = keeper._wait
    waits = []

    def a_late_write():  # the device finishing the program's work just after the sample was read
        original_wait()
        if not waits:
            outputs[4096:9096] = 9
        waits.append(1)

    outputs[:3000] = 7  # the first output written in the window, the second not yet
    monkeypatch.setattr(keeper, "_wait", a_late_write)
    reply = keeper.take({"slot": "outputs", "spans": spans, "dest": "host"})
    # 256 bytes drawn from 8000, 5000 of them written late: all escape with chance (3/8)^256
    assert reply["late_writes"] > 0
    assert bytes(shared["host"].map[:8000]) == bytes([7] * 3000 + [9] * 5000)  # the copy: all there
    record = CallRecord(seed=0, ms=1.0, wall_ms=1.0, cpu_ms=None, meta=[], late_writes=reply["late_writes"])
    assert rules.call_invariants(record, CallRecord(seed=0, ms=1.0, wall_ms=1.0, cpu_ms=None, meta=[])).rule == \
        "outputs_written_after_the_window"
    for closable in (*views.values(), *shared.values(), ours, theirs):
        closable.close()


def test_a_failing_keeper_step_is_an_error_of_the_keeper_not_a_hang(keeper):
    with pytest.raises(device_slots.KeeperError, match="place failed"):
        keeper.request({"cmd": "place", "slot": "none", "source": "none", "at": 0, "size": 1})


def _judge(source: str, **options):
    return evaluate(load_problem(RELU), source, EvalOptions(timing_budget=1.0, **options))


def test_an_exact_copy_is_judged_through_the_slots(monkeypatch):
    """Through the slots, and its timed outputs compared by the keeper, none of them brought to
    the host (the host's own comparison is never asked for in a timed round)."""
    from kernelopt.sandbox.timing import rounds

    monkeypatch.setenv(device_slots.MODE_VARIABLE, "host")
    rounds_compared, on_host_in_rounds, inside = [], [], []
    compare_outputs, compare_round = rounds.compare.compare_outputs, rounds.compare_round

    def counted_outputs(*args, **kwargs):
        if inside:
            on_host_in_rounds.append(1)
        return compare_outputs(*args, **kwargs)

    def counted_round(timer, cand, ref, **kwargs):
        inside.append(1)
        try:
            return compare_round(timer, cand, ref, **kwargs)
        finally:
            inside.clear()
            rounds_compared.append(len(cand))

    monkeypatch.setattr(rounds.compare, "compare_outputs", counted_outputs)
    monkeypatch.setattr(rounds, "compare_round", counted_round)
    result = _judge(EXACT_RELU)
    assert result.status == "correct", result.message
    assert "device slots" in result.timing.method
    assert "compared with the reference's by the keeper, on the device" in result.timing.method
    assert 0.5 < result.speedup < 2.0
    # Only the calls the every-element check keeps (a reservoir sample) come to the host.
    assert len(rounds_compared) >= 3 and 0 < len(on_host_in_rounds) < sum(rounds_compared) / 2, \
        (rounds_compared, len(on_host_in_rounds))
    on_host_in_rounds.clear()
    assert _judge(EXACT_RELU, element_checks=0).status == "correct" and not on_host_in_rounds


def test_a_constant_after_the_trials_is_caught_by_the_keepers_comparison(monkeypatch):
    """Family 3 of round four (what is checked is not what was timed) with the timed outputs
    compared on the device: the keeper's comparison fails it as the host's did."""
    monkeypatch.setenv(device_slots.MODE_VARIABLE, "host")
    result = _judge((HACKS / "constant_after_the_trials.py").read_text())
    assert result.status == "incorrect", result.message
    assert "timed_output_mismatch" in result.rules, (result.rules, result.message)


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



def test_outputs_said_to_share_bytes_of_the_slot_are_unusable_not_a_keeper_failure():
    """Two outputs of three quarters of the slot each, both at its start, lie inside it one by
    one; together they are more than the slot the keeper copies out of."""
    slot = 1 << 20
    elements = slot // 4 * 3 // 4
    meta = [[[elements], "torch.float32", "cpu"]] * 2

    def reply(spans):
        return CallReply.model_validate({"called": 1, "structure": "(T,T)", "aliases_input": False,
                                         "meta": meta, "slot_spans": spans})

    with pytest.raises(OutputsUnreadable, match="same bytes"):
        _check_slot_spans(reply([[0, elements * 4], [0, elements * 4]]), slot)
    with pytest.raises(OutputsUnreadable):
        _check_slot_spans(reply([[0, elements * 4], [elements * 4, elements * 4]]), slot)  # past the end
    half = [[[slot // 8], "torch.float32", "cpu"]] * 2
    fitting = CallReply.model_validate({"called": 1, "structure": "(T,T)", "aliases_input": False, "meta": half,
                                        "slot_spans": [[slot // 2, slot // 2], [0, slot // 2]]})
    _check_slot_spans(fitting, slot)  # side by side, in any order: fine

@pytest.mark.gpu
@pytest.mark.gpu_timing
def test_on_a_gpu_an_exact_copy_goes_through_the_slots_and_reads_one():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    result = evaluate(load_problem(RELU), EXACT_RELU, EvalOptions(device="cuda", timing_budget=2.0))
    assert result.status == "correct", result.message
    assert "device slots" in result.timing.method
    assert "compared with the reference's by the keeper, on the device" in result.timing.method
    assert 0.8 < result.speedup < 1.25


@pytest.mark.gpu
def test_on_a_gpu_the_keeper_compares_cuda_outputs_as_the_host_would():
    """The keeper's comparison with CUDA memory: the same numbers as the host's comparison of
    the same tensors on the CPU (whole outputs a step on the device, 16K elements on the CPU)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from dataclasses import asdict

    from kernelopt.sandbox.compare import Tolerances, compare_outputs

    torch.cuda.init()
    keeper = device_slots.Keeper(device_memory.CUDA, "cuda:0")
    try:
        for case in ("equal", "within tolerance", "outside tolerance", "NaN where the reference has none"):
            cand, ref = _outputs_pair(case)
            worker_ref, worker_cand = _CudaSlottedWorker(keeper), _CudaSlottedWorker(keeper)
            try:
                spans, ref_layouts = worker_ref.answer(ref)
                worker_ref.slots.take(spans, None, device_slots.OnDevice(keep="0"))
                spans, layouts = worker_cand.answer(cand)
                compared = worker_cand.slots.take(spans, None, device_slots.OnDevice(
                    compare_with="0", kept_side="reference", kept_layouts=ref_layouts, layouts=layouts,
                    tolerances=Tolerances.of(EvalOptions()).to_json()))
                expected = asdict(compare_outputs(cand, ref, EvalOptions()))
                assert compared.comparison is not None
                assert compared.comparison["passed"] == expected["passed"], case
                for key in ("max_abs_error", "max_rel_error", "rel_l2_error", "mismatch_fraction"):
                    assert compared.comparison[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-12), (case, key)
            finally:
                worker_ref.close()
                worker_cand.close()
    finally:
        keeper.close()


class _CudaSlottedWorker(_SlottedWorker):
    """_SlottedWorker over CUDA slots (mapped in this process, as a worker maps its own)."""

    kind = device_memory.CUDA

    def answer(self, outputs: list[torch.Tensor]):
        placed = super().answer([t.cuda() for t in outputs])
        torch.cuda.synchronize()  # written before the keeper copies (a worker syncs before it answers)
        return placed


@pytest.mark.gpu
@pytest.mark.gpu_timing
def test_the_keepers_idle_probe_is_short_on_an_idle_device_and_long_beside_another_contexts_work():
    """The probe the keeper times before every window (keeper.py, `_idle_probe_ms`): on an idle
    device about its own kernel's length; while another process keeps the device busy in its
    own context (what a frozen program's second context could do beside the reference's
    windows) it waits for a time slice. Reported in timing.device_probe_ms, judged by no rule
    yet: this test is where a GPU first says how far apart the two lie."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from kernelopt.sandbox.keeper import Keeper as KeeperCore

    core = KeeperCore(device_memory.CUDA, 0, socket.socketpair()[0])
    idle = sorted(core._idle_probe_ms() for _ in range(50))
    busy_loop = "import torch, time\nend = time.time() + 6\nwhile time.time() < end:\n    torch.cuda._sleep(10**8)\n    torch.cuda.synchronize()\n"
    other = subprocess.Popen([sys.executable, "-c", busy_loop])
    try:
        time.sleep(3)  # its context made and its first kernels queued
        busy = sorted(core._idle_probe_ms() for _ in range(20))
    finally:
        other.kill()
        other.wait()
    print(f"idle probe ms: median {idle[25]:.4f}, max {idle[-1]:.4f}; beside a busy context: median "
          f"{busy[10]:.4f}, max {busy[-1]:.4f}")
    assert idle[25] < 0.5
    assert busy[10] > 5 * idle[25]

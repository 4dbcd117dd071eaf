"""Container workers' calls through memory (issue 43): the input slot is a tmpfs file mounted
read-only into the container (sandbox/input_files.py), the outputs are read by the host from the
frozen worker's memory, so nothing of a call's data crosses the daemon's attach stream inside
the window. Unit tests of the slot and the container's configuration run anywhere; the rest
under the `docker` marker, against a real daemon and the CPU image (scripts/docker_tests.sh)."""

from __future__ import annotations

import mmap
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO
from test_adversarial import referee_options

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import containers, evaluate, input_files
from kernelopt.sandbox.input_files import FileInputSlot

RELU = REPO / "examples" / "level1" / "1_ReLU.py"
SOFTMAX = REPO / "examples" / "level1" / "4_RedundantSoftmax.py"
MEMORY_METHOD = "outputs read from the frozen worker's memory"


@pytest.fixture
def slot(tmp_path, monkeypatch):
    monkeypatch.setattr(input_files, "SLOT_DIRECTORY", str(tmp_path))
    made = FileInputSlot("candidate", 1 << 20, 64 << 10)
    yield made
    made.close()


def test_the_slot_holds_what_the_host_put_and_tells_a_changed_or_truncated_file(slot):
    packed = os.urandom(5000)
    assert slot.put(packed, at=4096) and slot.holds(packed, at=4096)
    assert not slot.put(packed, at=slot.size - 10), "a set that does not fit is not placed"
    with open(slot.path, "r+b") as outside:
        outside.seek(4096)
        outside.write(b"\0")
    assert not slot.holds(packed, at=4096)
    os.truncate(slot.path, 0)
    assert not slot.holds(packed, at=4096), "a truncated file holds nothing"


def test_a_truncated_slot_is_sized_again_by_the_hosts_next_write_not_a_sigbus(slot):
    """The worker's shared mapping sees the host's writes; a file truncated behind the host's
    back would SIGBUS a host that mapped it: the host writes with pwrite and sizes it again."""
    reader = open(slot.path, "rb")
    view = mmap.mmap(reader.fileno(), slot.size, prot=mmap.PROT_READ)
    os.truncate(slot.path, 0)
    packed = os.urandom(3000)
    assert slot.put(packed, at=8192)
    assert os.stat(slot.path).st_size == slot.size
    assert view[8192:8192 + len(packed)] == packed and slot.holds(packed, at=8192)
    view.close()
    reader.close()


def test_the_slot_file_is_gone_once_unlinked_and_after_close(slot):
    path = Path(slot.path)
    assert path.exists() and path.name.startswith(f"kernelopt-candidate-inputs-{os.getpid()}-")
    slot.unlink()
    assert not path.exists()
    assert slot.put(b"still usable through the host's descriptor")


def test_the_container_mounts_the_slot_read_only_and_the_worker_is_told_where(tmp_path):
    pytest.importorskip("docker")
    config = containers.container_config("img", containers.worker_command("candidate"), tmp_path, "cpu",
                                         containers.ContainerLimits(memory_bytes=1 << 30), {}, owner="h:1",
                                         uid=1000, gid=1000, channel_directory="/tmp/ch",
                                         inputs_path="/dev/shm/kernelopt-candidate-inputs-x")
    assert config["volumes"]["/dev/shm/kernelopt-candidate-inputs-x"] == {"bind": input_files.CONTAINER_PATH,
                                                                           "mode": "ro"}
    assert config["volumes"][str(tmp_path)]["mode"] == "rw"
    assert config["command"][-2:] == ["--inputs-path", input_files.CONTAINER_PATH]
    bare = containers.container_config("img", ["python3"], tmp_path, "cpu", containers.ContainerLimits(1 << 30), {},
                                       owner="h:1", uid=1000, gid=1000, channel_directory="/tmp/ch")
    assert list(bare["volumes"]) == [str(tmp_path), "/tmp/ch"] and "--inputs-path" not in bare["command"]


def test_the_worker_maps_the_slot_read_only_so_an_in_place_write_kills_only_the_worker(slot):
    """What a program that writes into an input view of the slot gets: SIGSEGV in its own process."""
    probe = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "kernelopt" / "sandbox")!r})
        import torch
        from worker.main import _map_read_only
        mapped = _map_read_only({slot.path!r})
        assert _map_read_only("/nonexistent") is None
        x = torch.frombuffer(memoryview(mapped)[:64], dtype=torch.float32)
        print(float(x.sum()), flush=True)
        x.add_(1)
        print("wrote", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == -11, (done.returncode, done.stdout, done.stderr)
    assert done.stdout.split() == ["0.0"]
    assert slot.holds(bytes(64)), "the write never reached the host's file"


# -- against a real daemon ----------------------------------------------------------------------

# A candidate of 1_ReLU that checks its input is a view of the slot, then tries every way it has
# to change or resize it (the mount, the mapping, /proc's view of it); any success is its error.
SLOT_ATTACK = '''
import ctypes, os
import torch
import torch.nn as nn


def slot_range():
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "kernelopt-" in line and "-inputs" in line:
                low, high = line.split()[0].split("-")
                return int(low, 16), int(high, 16), line.split()[0]
    raise RuntimeError("NO SLOT MAPPED")


class ModelNew(nn.Module):
    def forward(self, x):
        low, high, span = slot_range()
        if not low <= x.data_ptr() < high:
            raise RuntimeError("THE INPUT IS NOT A VIEW OF THE SLOT")
        won = []
        for name, attempt in [
            ("truncate", lambda: os.truncate("/kernelopt-inputs", 0)),
            ("open for writing", lambda: os.close(os.open("/kernelopt-inputs", os.O_RDWR))),
            ("map_files", lambda: os.close(os.open("/proc/self/map_files/" + span, os.O_RDWR))),
            ("map_files truncate", lambda: os.truncate("/proc/self/map_files/" + span, 0)),
        ]:
            try:
                attempt()
                won.append(name)
            except OSError:
                pass
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if libc.mprotect(low, high - low, 3) == 0:
            won.append("mprotect")
        if won:
            raise RuntimeError("ESCAPED: " + ", ".join(won))
        return torch.relu(x)
'''

IN_PLACE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu_(x).clone()
'''


def quick(fast_options):
    return fast_options(isolation="docker", image=containers.DEFAULT_IMAGE, timing_budget=0.3,
                        correctness_trials=2, warmup_calls=1, min_timed_calls=3)


def slot_files() -> list[str]:
    return [name for name in os.listdir(input_files.SLOT_DIRECTORY) if name.startswith("kernelopt-")]


def mine(client) -> list:
    owner = f"{socket.gethostname()}:{os.getpid()}"
    return [c for c in client.containers.list(all=True) if c.labels.get(containers.OWNER_LABEL) == owner]


@pytest.mark.docker
def test_container_calls_go_through_the_slot_and_the_workers_memory(fast_options):
    docker = pytest.importorskip("docker")
    before = slot_files()
    source = (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text()
    result = evaluate(load_problem(RELU), source, quick(fast_options))
    assert result.status == "correct", result.message
    assert MEMORY_METHOD in result.timing.method, result.timing.method
    assert "inputs in a read-only slot" in result.isolation.containment_detail
    assert slot_files() == before, "no slot file outlives its worker"
    assert not mine(docker.from_env())


@pytest.mark.docker
def test_a_candidate_cannot_truncate_remap_or_reopen_its_slot(fast_options):
    result = evaluate(load_problem(RELU), SLOT_ATTACK, quick(fast_options))
    assert result.status == "correct", result.message  # every attempt refused, the input a view of the slot
    assert MEMORY_METHOD in result.timing.method


@pytest.mark.docker
def test_an_in_place_write_into_an_input_is_the_candidates_own_crash(fast_options):
    result = evaluate(load_problem(RELU), IN_PLACE, quick(fast_options))
    assert result.status == "runtime_error", result.message
    assert "SIGSEGV" in result.message and "mapped read-only" in result.message and "bubblewrap" in result.message
    honest = evaluate(load_problem(RELU), (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text(),
                      quick(fast_options))
    assert honest.status == "correct", "the host and the next evaluation are unharmed"


@pytest.mark.docker
def test_where_the_host_cannot_hold_the_container_its_calls_travel_in_frames(fast_options, monkeypatch):
    """A remote or rootless daemon's container (its cgroup not adopted: the daemon pauses it) gets
    no slot: inputs and outputs travel in frames, and the isolation record says so."""
    from kernelopt.sandbox import containment

    monkeypatch.setattr(containment.Group, "adopt", classmethod(lambda cls, pid, runtime, container_id: None))
    before = slot_files()
    source = (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text()
    result = evaluate(load_problem(RELU), source, quick(fast_options))
    assert result.status == "correct", result.message
    assert "outputs sent in the worker's answer" in result.timing.method, result.timing.method
    assert "in frames through the daemon's attach stream" in result.isolation.containment_detail
    assert slot_files() == before


@pytest.mark.docker
def test_an_exact_copy_of_the_softmax_reads_about_1x_in_containers():
    """A 4.5 ms call: with frames in the window it read 12-13 ms and 0.785x-1.00x (issue 43)."""
    source = SOFTMAX.read_text().replace("class Model(", "class ModelNew(")
    result = evaluate(load_problem(SOFTMAX), source, referee_options(isolation="docker"))
    assert result.status == "correct", result.message
    assert MEMORY_METHOD in result.timing.method
    assert 0.8 <= result.speedup <= 1.25, (result.speedup, result.timing.reference.median_ms,
                                           result.timing.candidate.median_ms)


def test_a_full_tmpfs_makes_the_inputs_travel_in_the_frame_not_a_host_error(slot, monkeypatch):
    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(input_files.os, "pwrite", full)
    assert slot.put(b"x" * 100) is False


def test_slot_files_of_a_kernelopt_that_is_gone_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(input_files, "SLOT_DIRECTORY", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    orphan = tmp_path / f"kernelopt-reference-inputs-{dead}-0123456789ab"
    orphan.write_bytes(b"x")
    live = FileInputSlot("candidate", 1 << 16, 4096)
    other = tmp_path / "kernelopt-notes.txt"
    other.write_text("not a slot")
    try:
        assert input_files.remove_orphans() == 1
        assert not orphan.exists() and Path(live.path).exists() and other.exists()
    finally:
        live.close()

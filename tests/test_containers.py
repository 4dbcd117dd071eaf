"""The docker backend: the container it asks for, the stream it reads, the errors it gives, and
whole evaluations through it (against tests/fake_docker.py here; a real daemon under `docker`)."""

from __future__ import annotations

import os
import struct
import sys

import pytest
from conftest import REPO
from fake_docker import FakeDaemon

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import containers, evaluate, isolation
from kernelopt.sandbox.worker import wire

docker = pytest.importorskip("docker")

LIMITS = containers.ContainerLimits(memory_bytes=8 << 30, pids=256, cpus=4.0)


def config_for(device: str, tmp_path):
    env = {"HOME": str(tmp_path), "PATH": "/host/bin", "CUDA_HOME": "/host/cuda", "OMP_NUM_THREADS": "1"}
    return containers.container_config("kernelopt-sandbox", containers.worker_command("candidate"), tmp_path,
                                       device, LIMITS, env, owner="host:42", uid=1234, gid=1234)


def test_a_worker_container_is_locked_down(tmp_path):
    config = config_for("cpu", tmp_path)
    assert config["network_mode"] == "none" and config["read_only"] is True
    assert config["cap_drop"] == ["ALL"] and config["security_opt"] == ["no-new-privileges:true"]
    assert config["user"] == "1234:1234"
    assert config["pids_limit"] == 256 and config["mem_limit"] == config["memswap_limit"] == 8 << 30
    assert config["nano_cpus"] == 4_000_000_000
    assert config["volumes"] == {str(tmp_path): {"bind": str(tmp_path), "mode": "rw"}}, "scratch is the only mount"
    assert set(config["tmpfs"]) == {"/tmp"} and config["working_dir"] == str(tmp_path)
    assert config["ipc_mode"] == "private" and config["init"] is True and config["stdin_open"] is True
    assert "device_requests" not in config, "a CPU evaluation gets no GPU"
    assert config["environment"] == {"HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}, "the host's paths stay out"
    assert config["labels"] == {containers.OWNER_LABEL: "host:42"}


def test_the_sdk_turns_the_configuration_into_the_request_docker_receives(tmp_path):
    """Every keyword is one the SDK knows (an unknown one raises) and lands where intended."""
    from docker.models.containers import _create_container_args

    request = _create_container_args(dict(config_for("cuda:1", tmp_path), version="1.45"))
    host = request["host_config"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True and host["Init"] is True
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["PidsLimit"] == 256 and host["Memory"] == host["MemorySwap"] == 8 << 30
    assert host["Binds"] == [f"{tmp_path}:{tmp_path}:rw"] and list(host["Tmpfs"]) == ["/tmp"]
    assert [r["DeviceIDs"] for r in host["DeviceRequests"]] == [["1"]]
    assert request["user"] == "1234:1234" and request["stdin_open"] is True


def test_a_cuda_worker_gets_only_its_gpu(tmp_path):
    requests = config_for("cuda:2", tmp_path)["device_requests"]
    assert len(requests) == 1
    assert requests[0]["DeviceIDs"] == ["2"] and requests[0]["Capabilities"] == [["gpu"]]
    backend = isolation.select_backend("docker", "img")
    assert isolation.device_inside(backend, "cuda:2") == "cuda:0"
    assert isolation.device_inside(isolation.Backend("bubblewrap", True, True, True), "cuda:2") == "cuda:2"


def test_the_worker_speaks_on_the_containers_stdin_and_stdout():
    command = containers.worker_command("reference")
    assert command[:4] == ["python3", "-E", "-s", "-c"] and containers.WORKER_ROOT in command[4]
    assert command[-4:] == ["--cmd-fd", "0", "--out-fd", "1"]


def test_the_attach_stream_is_demultiplexed_however_it_is_split():
    frames = [(1, b"reply one"), (2, b"a print\n"), (1, b""), (1, bytes(range(256)) * 3), (2, b"x")]
    stream = b"".join(struct.pack(">BxxxL", s, len(p)) + p for s, p in frames)
    for cut in range(len(stream) + 1):
        for step in (1, 7, 4096):
            demux, got = containers.Demultiplexer(), []
            pieces = [stream[:cut]] + [stream[i:i + step] for i in range(cut, len(stream), step)]
            for piece in pieces:
                got += demux.feed(piece)
            assert got == frames
    with pytest.raises(wire.ProtocolError):
        containers.Demultiplexer().feed(b"HTTP/1.1 500 oops")


def test_exit_codes_map_to_signals_as_popen_reports_them():
    assert containers._as_signal_code(137) == -9 and containers._as_signal_code(139) == -11
    assert containers._as_signal_code(0) == 0 and containers._as_signal_code(3) == 3


def test_no_sdk_no_daemon_no_image_no_gpu_runtime_each_say_what_to_do(monkeypatch):
    containers.connect.cache_clear()
    monkeypatch.setitem(sys.modules, "docker", None)
    with pytest.raises(containers.DockerError, match="pip install"):
        containers.connect("kernelopt-sandbox", "cpu")
    monkeypatch.undo()
    containers.connect.cache_clear()
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(containers.DockerError, match="cannot reach the Docker daemon.*docker info"):
        containers.connect("kernelopt-sandbox", "cpu")

    class NoImage(FakeDaemon):
        def get(self, name):
            raise docker.errors.ImageNotFound(name)

    with pytest.raises(containers.DockerError, match="docker build -t mine ."):
        containers.check_image(NoImage(), "mine")
    with pytest.raises(containers.DockerError, match="speaks worker protocol 0"):
        containers.check_image(FakeDaemon(labels={containers.PROTOCOL_LABEL: "0"}), "old")
    with pytest.raises(containers.DockerError, match="NVIDIA Container Toolkit"):
        containers.check_nvidia_runtime({"Runtimes": {"runc": {}}})
    containers.check_nvidia_runtime({"Runtimes": {"nvidia": {}}})
    containers.check_nvidia_runtime({"CDISpecDirs": ["/etc/cdi"]})


def test_the_cli_names_the_missing_daemon(tmp_path):
    import subprocess

    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    done = subprocess.run([sys.executable, "-m", "kernelopt", "eval", "--reference",
                           str(REPO / "examples/level1/1_ReLU.py"), "--candidate",
                           str(REPO / "examples/candidates/1_ReLU/relu_clamp.py"), "--device", "cpu",
                           "--sandbox", "docker"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert "cannot reach the Docker daemon" in done.stderr and not done.stdout


def test_orphans_of_a_dead_kernelopt_are_removed():
    import socket

    daemon = FakeDaemon()
    host = socket.gethostname()
    mine = daemon.create(labels={containers.OWNER_LABEL: f"{host}:{os.getpid()}"})
    orphan = daemon.create(labels={containers.OWNER_LABEL: f"{host}:999999999"})
    elsewhere = daemon.create(labels={containers.OWNER_LABEL: "otherhost:999999999"})
    assert containers.remove_orphans(daemon) == 1
    assert daemon.removed == [orphan.id] and not mine.removed and not elsewhere.removed


@pytest.fixture
def fake_daemon(monkeypatch):
    daemon = FakeDaemon()
    monkeypatch.setattr(docker, "from_env", lambda **kwargs: daemon)
    containers.connect.cache_clear()
    yield daemon
    containers.connect.cache_clear()


def docker_options(fast_options, **extra):
    return fast_options(isolation="docker", image="kernelopt-sandbox", **extra)


def corpus(rel: str) -> str:
    return (REPO / "tests" / "adversarial" / rel).read_text()


def test_an_evaluation_runs_each_worker_in_its_own_container(fake_daemon, example, fast_options):
    source = (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text()
    result = evaluate(load_problem(example("1_ReLU")), source, docker_options(fast_options))
    assert result.status == "correct", result.message
    assert result.isolation.backend == "docker"
    assert len(fake_daemon.created) == 2, "one container for the reference, one for the candidate"
    assert all(c.removed for c in fake_daemon.created), "no container outlives its evaluation"
    assert all(c.config["network_mode"] == "none" for c in fake_daemon.created)
    # The container is the worker's group: paused by its daemon during the other side's turn.
    assert result.isolation.containment == "docker" and "uncontained" not in result.flags
    assert all(c.pauses > 0 for c in fake_daemon.created), "each side is paused during the other's turn"


@pytest.mark.parametrize("case", ["hacks/io_steal_stdin.py", "hacks/io_stdout_flood.py",
                                  "hacks/child_fork_finishes_output.py", "hacks/thread_native_pthread.py",
                                  "hacks/crash_segfault_in_forward.py"])
def test_hacks_on_the_channel_and_the_census_are_caught_in_a_container(fake_daemon, example, fast_options, case):
    from test_adversarial import CORPUS, check_verdict, parse_case, problem_path

    parsed = parse_case(CORPUS / case)
    result = evaluate(load_problem(problem_path(parsed.problem)), corpus(case),
                      docker_options(fast_options, timeout=parsed.timeout))
    assert check_verdict(parsed, result, 0.0) == [], result.message


def test_a_hanging_candidate_is_killed_with_its_container(fake_daemon, example, fast_options):
    result = evaluate(load_problem(example("1_ReLU")), corpus("hacks/hang_infinite_loop.py"),
                      docker_options(fast_options, timeout=20))
    assert result.status == "timeout"
    assert all(c.removed and c.process.poll() is not None for c in fake_daemon.created)

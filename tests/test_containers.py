"""The docker backend: the container it asks for, the stream it reads, the errors it gives (no
daemon needed), and a daemon that dies in the middle of a call (tests/fake_docker.py: what a real
daemon cannot be made to do on cue). Whole evaluations in real containers: tests/test_docker.py
and the corpus's docker subset (tests/test_adversarial.py), under the `docker` marker."""

from __future__ import annotations

import os
import socket
import struct
import sys
import time

import pytest
from conftest import REPO
from fake_docker import FakeDaemon

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import containers, evaluate, isolation, process_tree
from kernelopt.sandbox.process import DaemonGone, SandboxError
from kernelopt.sandbox.worker import wire

docker = pytest.importorskip("docker")

LIMITS = containers.ContainerLimits(memory_bytes=8 << 30, pids=256, cpus=4.0)


def config_for(device: str, tmp_path):
    env = {"HOME": str(tmp_path), "PATH": "/host/bin", "CUDA_HOME": "/host/cuda", "OMP_NUM_THREADS": "1"}
    return containers.container_config("kernelopt-sandbox", containers.worker_command("candidate"), tmp_path,
                                       device, LIMITS, env, owner="host:42", uid=1234, gid=1234,
                                       channel_directory="/tmp/kernelopt-channel-x")


def test_a_worker_container_is_locked_down(tmp_path):
    config = config_for("cpu", tmp_path)
    assert config["network_mode"] == "none" and config["read_only"] is True
    assert config["cap_drop"] == ["ALL"] and config["security_opt"] == ["no-new-privileges:true"]
    assert config["user"] == "1234:1234"
    assert config["pids_limit"] == 256 and config["mem_limit"] == config["memswap_limit"] == 8 << 30
    assert config["nano_cpus"] == 4_000_000_000
    assert config["volumes"] == {
        str(tmp_path): {"bind": str(tmp_path), "mode": "rw"},
        "/tmp/kernelopt-channel-x": {"bind": "/kernelopt-channel", "mode": "ro"},
    }, "scratch is the only writable mount; the channel's socket directory is read-only"
    assert set(config["tmpfs"]) == {"/tmp"} and config["working_dir"] == str(tmp_path)
    assert config["ipc_mode"] == "private" and config["init"] is True and config["stdin_open"] is False
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
    assert host["Binds"] == [f"{tmp_path}:{tmp_path}:rw", "/tmp/kernelopt-channel-x:/kernelopt-channel:ro"]
    assert list(host["Tmpfs"]) == ["/tmp"]
    assert [r["DeviceIDs"] for r in host["DeviceRequests"]] == [["1"]]
    assert request["user"] == "1234:1234" and request["stdin_open"] is False


def test_a_cuda_worker_gets_only_its_gpu(tmp_path):
    requests = config_for("cuda:2", tmp_path)["device_requests"]
    assert len(requests) == 1
    assert requests[0]["DeviceIDs"] == ["2"] and requests[0]["Capabilities"] == [["gpu"]]
    backend = isolation.select_backend("docker", "img")
    assert isolation.device_inside(backend, "cuda:2") == "cuda:0"
    assert isolation.device_inside(isolation.Backend("bubblewrap", True, True, True), "cuda:2") == "cuda:2"


def test_the_worker_speaks_on_the_hosts_socket_not_the_attach_stream():
    command = containers.worker_command("reference")
    assert command[:4] == ["python3", "-E", "-s", "-c"] and containers.WORKER_ROOT in command[4]
    assert command[-2:] == ["--channel-path", "/kernelopt-channel/worker.sock"]


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


MARK = b"kernelopt-test: in forward"
SLOW_FORWARD = "def forward(self, x):\n        print({mark!r}, file=__import__('sys').stderr, flush=True)\n" \
               "        __import__('time').sleep(2)"


class DyingDaemon(FakeDaemon):
    """What a real daemon cannot be made to do on cue: die in the middle of a call. The forward
    of one side (`role`) announces itself on its stderr and then sleeps; at that side's third
    forward the daemon goes, while the call is in flight: the attach streams close, every API
    call (a ping, a pause) fails, and the container's processes, like a real daemon's under
    containerd, keep running until someone kills them; the worker's socket channel does not pass
    through the daemon, so the call still answers, and the pause that should follow it fails."""

    def __init__(self, role: str):
        super().__init__()
        self.role, self.dead, self.forwards = role, False, 0

    def create(self, **config):
        container = super().create(**config)
        daemon, reload, mux = self, container.reload, container._mux

        def reload_unless_dead():
            if daemon.dead:
                raise ConnectionError("the Docker daemon is gone")
            reload()

        def mux_then_maybe_die(pipe, stream):
            if daemon.role not in config["command"] or stream != 2:
                return mux(pipe, stream)
            while chunk := pipe.read1(1 << 16):
                if daemon.dead:
                    return
                try:
                    with container._send_lock:
                        container._container_side.sendall(struct.pack(">BxxxL", stream, len(chunk)) + chunk)
                except OSError:
                    return
                daemon.forwards += chunk.count(MARK)
                if daemon.forwards >= 3:
                    daemon.die()

        container.reload, container._mux = reload_unless_dead, mux_then_maybe_die
        for name in ("pause", "unpause", "stats", "remove"):
            setattr(container, name, self._gone)
        return container

    def ping(self):
        return self._gone() is None

    def _gone(self, *args, **kwargs):
        if self.dead:
            raise ConnectionError("the Docker daemon is gone")
        return None

    def die(self):
        self.dead = True
        for container in self.created:
            try:
                container._container_side.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.mark.parametrize("role", ["candidate", "reference"])
def test_a_daemon_that_dies_mid_call_is_the_environments_failure_and_leaves_no_process(
        monkeypatch, tmp_path, example, fast_options, role):
    """Whichever side's call is in flight, a dead daemon is no verdict on the candidate and no
    error of the problem: the host asks the daemon, and the evaluation ends as the sandbox's
    failure (SandboxError: the CLI's exit 3, "error": "environment")."""
    daemon = DyingDaemon(role)
    monkeypatch.setattr(docker, "from_env", lambda **kwargs: daemon)
    containers.connect.cache_clear()
    problem_path, candidate = example("1_ReLU"), (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text()
    slow = SLOW_FORWARD.format(mark=MARK.decode())
    if role == "candidate":
        candidate = candidate.replace("def forward(self, x: torch.Tensor) -> torch.Tensor:", slow)
    else:
        problem_path = tmp_path / "1_ReLU.py"
        problem_path.write_text(example("1_ReLU").read_text().replace(
            "def forward(self, x: torch.Tensor) -> torch.Tensor:", slow))
    assert MARK.decode() in candidate or MARK.decode() in problem_path.read_text()
    started = time.monotonic()
    try:
        with pytest.raises(SandboxError) as raised:
            evaluate(load_problem(problem_path), candidate, docker_options(fast_options, timeout=60))
    finally:
        containers.connect.cache_clear()
    assert time.monotonic() - started < 120, "a dead daemon does not hang the evaluation"
    assert daemon.dead and daemon.forwards >= 3, "the daemon died while the call was in flight"
    assert isinstance(raised.value, DaemonGone), raised.value
    message = str(raised.value)
    assert "Docker daemon stopped answering" in message and f"the {role} worker's request" in message, message
    assert_killed(daemon)


def assert_killed(daemon: FakeDaemon) -> None:
    """Every process of every container is gone (a SIGKILL lands in a moment, not at once)."""
    for container in daemon.created:
        if container.process is not None:
            container.process.wait(timeout=5)  # raises where it lives on


def test_a_worker_that_dies_under_a_live_daemon_is_still_the_candidates_verdict(monkeypatch, example, fast_options):
    """The daemon's check blames the environment only where the daemon is gone: a candidate
    that exits in its call, the daemon answering, is the candidate's runtime_error."""
    daemon = FakeDaemon()
    monkeypatch.setattr(docker, "from_env", lambda **kwargs: daemon)
    containers.connect.cache_clear()
    candidate = (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text().replace(
        "def forward(self, x: torch.Tensor) -> torch.Tensor:",
        "def forward(self, x: torch.Tensor) -> torch.Tensor:\n        __import__('os')._exit(3)")
    try:
        result = evaluate(load_problem(example("1_ReLU")), candidate, docker_options(fast_options, timeout=60))
    finally:
        containers.connect.cache_clear()
    assert result.status == "runtime_error", result.message
    assert "exited with code 3" in result.message, result.message


class Pinged:
    def __init__(self, answer=True, error=None, delay=0.0):
        self.answer, self.error, self.delay = answer, error, delay

    def ping(self):
        time.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.answer


def test_the_daemon_check_tells_an_answer_from_an_error_or_silence():
    assert containers.daemon_silent(Pinged()) is None
    assert "ConnectionError: gone" in containers.daemon_silent(Pinged(error=ConnectionError("gone")))
    assert containers.daemon_silent(Pinged(answer=False)) == "a ping answered False"
    started = time.monotonic()
    assert containers.daemon_silent(Pinged(delay=5.0), timeout=0.2) == "no answer to a ping in 0.2 s"
    assert time.monotonic() - started < 2.0, "a hung daemon costs the check's timeout, not the client's"


def test_a_living_containers_poll_does_not_ask_the_daemon():
    """The memory watchdog polls every 50 ms a worker: while the container's init (a process of
    this host) lives, no inspect goes to the daemon; once it is gone (or its pid is another
    process's), the daemon says how it ended."""
    import subprocess

    class Inspected:
        def __init__(self, status):
            self.reloads, self.attrs = 0, {"State": {"Status": status, "ExitCode": 137}}

        def reload(self):
            self.reloads += 1

    living = object.__new__(containers.ContainerProcess)
    living.pid, living.returncode, living.container = os.getpid(), None, Inspected("running")
    living._started_at = process_tree.start_time(os.getpid())
    assert living._started_at is not None
    assert [living.poll() for _ in range(100)] == [None] * 100 and living.container.reloads == 0

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = process_tree.start_time(child.pid)
    child.wait()
    ended = object.__new__(containers.ContainerProcess)
    ended.pid, ended.returncode, ended.container, ended._started_at = child.pid, None, Inspected("exited"), started
    assert ended.poll() == -9 and ended.container.reloads == 1
    reused = object.__new__(containers.ContainerProcess)  # the pid now names a process started later
    reused.pid, reused.returncode, reused.container = os.getpid(), None, Inspected("exited")
    reused._started_at = living._started_at - 1
    assert reused.poll() == -9 and reused.container.reloads == 1

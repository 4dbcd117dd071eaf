"""The kernel-enforced group per worker (kernelopt/sandbox/containment.py), on each mechanism this
machine offers: what the group sees, freezes, charges and kills that the tree walk
(process_tree.py) does not. Every group a test makes is removed by its fixture, a failed test's
included; nothing here asserts on how fast anything ran."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelopt.sandbox import containment, doctor, rules
from kernelopt.sandbox.process_tree import TreeWalk

REPO = Path(__file__).resolve().parents[1]


def judged_on_relu(corpus_file: str, isolation: str = "auto"):
    """A corpus candidate (e.g. "honest/relu_exact_copy.py") judged on the ReLU example, quickly."""
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import EvalOptions, evaluate

    source = (REPO / "tests" / "adversarial" / corpus_file).read_text()
    return evaluate(load_problem(REPO / "examples" / "level1" / "1_ReLU.py"), source,
                    EvalOptions(device="cpu", timing_budget=1.0, min_timed_calls=3, isolation=isolation))

# A process that double-forks a helper into a new session; the helper's leader thread exits
# (SYS_exit) while a second thread runs `WORK`; the process prints the helper's pid and sleeps.
_EXITED_LEADER = textwrap.dedent("""
    import ctypes, os, sys, threading, time
    WORK = sys.argv[1]
    def work():
        if WORK == "spin":
            while True:
                pass
        block = bytearray(int(WORK))  # resident: every page written
        for i in range(0, len(block), 4096):
            block[i] = 1
        while True:
            time.sleep(1)
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            threading.Thread(target=work).start()
            time.sleep(0.3)
            os.write(write, str(os.getpid()).encode())
            ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: the leader thread alone
        os._exit(0)
    os.close(write)
    print(os.read(read, 32).decode(), flush=True)
    time.sleep(120)
""")

# A process whose child burns `seconds` of CPU time and exits (reaped); then it says so and sleeps.
_CHILD_BURNS = textwrap.dedent("""
    import os, sys, time
    pid = os.fork()
    if pid == 0:
        while time.process_time() < float(sys.argv[1]):
            pass
        os._exit(0)
    os.waitpid(pid, 0)
    print("done", flush=True)
    time.sleep(120)
""")


def _mechanism(name: str) -> containment.Mechanism:
    try:
        return containment.detect(name)
    except containment.ContainmentError as exc:
        pytest.skip(f"{name} is not usable here: {exc}")


@pytest.fixture(params=["cgroup2", "cgroup1"])
def mechanism(request) -> containment.Mechanism:
    return _mechanism(request.param)


class Started:
    """A process started through a group's launcher, and the tree walk from it."""

    def __init__(self, group: containment.Group, script: str, *args: str):
        self.process = subprocess.Popen(group.launcher() + [sys.executable, "-c", script, *args],
                                        stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.walk = TreeWalk()
        self.walk.attach(self.process.pid)
        self.walk.worker_pid = self.process.pid
        self.first_line = self.process.stdout.readline().strip()


@pytest.fixture
def group(mechanism):
    made = containment.Group(mechanism)
    started: list[Started] = []
    yield made, lambda script, *args: started.append(Started(made, script, *args)) or started[-1]
    made.remove()
    for item in started:
        item.process.kill()
        item.process.wait()
    assert not made.paths, f"groups left behind: {made.paths}"
    for parent in mechanism.parents.values():
        assert not (parent / made.name).exists()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _wait_exited_leader(pid: int) -> None:
    """Until the helper's leader thread has exited (it reports its pid just before)."""
    deadline = time.monotonic() + 20
    while _state(pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)


def _live_threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task") if _state(int(t)) not in ("Z", "X", "gone")]
    except OSError:
        return []


def test_the_group_sees_a_process_whose_leader_exited_where_the_tree_walk_does_not(group):
    made, start = group
    started = start(_EXITED_LEADER, "spin")
    helper = int(started.first_line)
    _wait_exited_leader(helper)
    assert _state(helper) == "Z" and _live_threads(helper), "the helper's leader exited, a thread runs on"
    assert helper in made.members()
    assert set(_live_threads(helper)) <= set(made.threads())
    assert helper not in started.walk.members()  # reparented out of the tree, and reads as a zombie
    assert len(made.members()) == 2  # the starter and the helper


def test_freeze_stops_every_thread_of_every_member(group):
    made, start = group
    start(_EXITED_LEADER, "spin")
    assert made.freeze() and made.is_frozen()
    frozen_at = made.cpu_seconds()
    time.sleep(0.3)
    assert made.cpu_seconds() - frozen_at < 0.005  # nothing ran while frozen (a spinning thread would)
    assert made.thaw() and not made.is_frozen()
    deadline = time.monotonic() + 20
    while made.cpu_seconds() - frozen_at < 0.01 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert made.cpu_seconds() - frozen_at >= 0.01  # thawed, the helper spins again


def test_cpu_seconds_count_an_exited_child(group):
    made, start = group
    started = start(_CHILD_BURNS, "0.3")
    assert started.first_line == "done"
    assert made.cpu_seconds() >= 0.3  # the child's CPU time stays in the group after it exited
    assert started.walk.cpu_seconds() < 0.3  # the parent's CPU clock never had it


def test_kill_ends_a_double_forked_helper_in_a_new_session(group):
    made, start = group
    started = start(_EXITED_LEADER, "spin")
    helper = int(started.first_line)
    assert made.kill()
    assert made.members() == [] and made.threads() == []
    started.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _state(helper) not in ("gone",) and time.monotonic() < deadline:
        time.sleep(0.02)  # the helper's new parent (init) reaps it
    assert _state(helper) == "gone"


def test_memory_counts_every_member(group):
    made, start = group
    size = 200 << 20
    started = start(_EXITED_LEADER, str(size))
    helper = int(started.first_line)
    _wait_exited_leader(helper)
    assert helper in made.members()
    assert made.memory_bytes() >= size  # the helper's pages, read through its live thread
    assert started.walk.memory_bytes() < size  # the walk never reaches the helper


# Writes `size` bytes to a tmpfs file (no mapping: nobody's resident memory), says so, and sleeps.
_WRITES_TMPFS = textwrap.dedent("""
    import sys, time
    with open(sys.argv[1], "wb") as held:
        for _ in range(int(sys.argv[2]) >> 20):
            held.write(bytes(1 << 20))
    print("written", flush=True)
    time.sleep(120)
""")


def test_memory_counts_a_tmpfs_file_where_a_controller_charges_it(group, tmp_path):
    made, start = group
    if not made.mechanism.memory or not os.path.isdir("/dev/shm"):
        pytest.skip(f"no memory controller covers {made.mechanism.name} groups here")
    size, path = 200 << 20, f"/dev/shm/kernelopt-test-{os.getpid()}"
    try:
        started = start(_WRITES_TMPFS, path, str(size))
        assert started.first_line == "written"
        assert made.memory_bytes() >= size
        assert started.walk.memory_bytes() < size  # no process holds it resident
    finally:
        os.unlink(path)


def test_the_kernel_memory_limit_kills_past_it(group):
    made, start = group
    if not made.mechanism.memory:
        assert not made.limit_memory(100 << 20)
        pytest.skip(f"no memory controller covers {made.mechanism.name} groups here")
    assert made.limit_memory(100 << 20) and not made.oom_killed()
    started = start(_EXITED_LEADER, str(400 << 20))  # the helper dies before it reports
    assert started.first_line == ""
    assert made.oom_killed()


def test_detect_names_a_mechanism_and_why_not_a_stronger_one(monkeypatch):
    monkeypatch.delenv(containment.ENV_VAR, raising=False)
    found = containment.detect()
    assert found.name in containment.MECHANISMS
    assert found.record().startswith(found.name)
    with pytest.raises(containment.ContainmentError, match="choose one of"):
        containment.detect("cgroup3")
    monkeypatch.setenv(containment.ENV_VAR, "none")
    assert containment.detect().name == "none" and containment.ENV_VAR in containment.detect().reason


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a probe as an unprivileged user")
def test_an_unprivileged_user_gets_none_with_the_reason():
    probe = "from kernelopt.sandbox import containment; print(containment.detect().record())"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO,
                              user=65534, group=65534, env={**os.environ, containment.ENV_VAR: "auto"}, timeout=120)
    except PermissionError as exc:
        pytest.skip(f"the interpreter is not usable by nobody: {exc}")
    if done.returncode != 0:
        pytest.skip(f"the repository is not readable by nobody: {done.stderr[-300:]}")
    assert done.stdout.startswith("none;") and "not writable" in done.stdout


def test_forced_none_is_reported_by_doctor_and_flags_the_verdict(monkeypatch):
    monkeypatch.setenv(containment.ENV_VAR, "none")
    report = doctor.Report()
    check = doctor._check_containment(report)
    assert not check.ok and check.detail.startswith("none") and "uncontained" in check.detail
    assert report.containment == "none" and "containment: none" in doctor.render(report)
    verdict = rules.uncontained("none", "none; containment turned off")
    assert verdict is not None and verdict.status == rules.FLAGGED and verdict.flags == ("uncontained",)
    assert rules.uncontained("cgroup2", "cgroup2") is None and rules.uncontained("docker", "") is None

    result = judged_on_relu("honest/relu_exact_copy.py")
    assert "uncontained" in result.flags and "uncontained" in result.rules
    assert result.isolation.containment == "none" and "KERNELOPT_CONTAINMENT=none" in result.isolation.containment_detail


def test_a_verdict_names_the_kernel_group_that_held_the_candidate(monkeypatch):
    mechanism = _mechanism("cgroup2" if containment.detect().name == "cgroup2" else "cgroup1")
    monkeypatch.setenv(containment.ENV_VAR, mechanism.name)
    result = judged_on_relu("honest/relu_exact_copy.py")
    assert result.status == "correct", result.message
    assert "uncontained" not in result.flags
    assert result.isolation.containment == mechanism.name
    assert result.isolation.containment_detail.startswith(mechanism.name)
    assert "group" in result.isolation.memory_limit_mechanism
    leftovers = [p for parent in mechanism.parents.values()
                 for p in parent.glob(f"kernelopt-{os.getpid()}-*")]
    assert leftovers == []  # the workers' groups went with them


def test_a_group_no_process_can_enter_is_no_mechanism(monkeypatch):
    """detect() moves a real process into a trial group: where the kernel refuses (a v2 group
    that cannot hold processes, say), the host falls back and says why, instead of every worker
    failing to start."""
    monkeypatch.delenv(containment.ENV_VAR, raising=False)
    if containment.detect().name == "none":
        pytest.skip("no cgroup is writable here")
    refused = ["/bin/sh", "-c", "echo 'write error: Operation not supported' >&2; exit 125", "kernelopt-enter"]
    monkeypatch.setattr(containment.Group, "launcher", lambda self: refused)
    found = containment.detect()
    assert found.name == "none" and "could not enter a new group" in found.reason
    assert "Operation not supported" in found.reason
    with pytest.raises(containment.ContainmentError, match="required.*Operation not supported"):
        containment.detect("required")  # refused, not judged uncontained


@pytest.mark.parametrize("backend", ["unshare", "none"])
def test_a_helper_that_writes_itself_out_of_the_group_stays_in_it_or_flags_the_verdict(backend):
    """The group holds only as long as the worker cannot write the cgroup filesystem. Under
    unshare the worker gets a fresh read-only /sys and no capabilities, so the helper that tries
    to leave is still counted (child_processes); the none backend cannot keep it in, and says so
    on every verdict (uncontained, with how it could leave)."""
    from kernelopt.sandbox import isolation

    if containment.detect().name == "none":
        pytest.skip("no kernel group on this machine")
    if not isolation.backend_works(backend):
        pytest.skip(f"the {backend} backend does not work here")
    result = judged_on_relu("hacks/helper_leaves_its_cgroup.py", backend)
    if backend == "unshare":
        assert result.status == "rejected" and result.flags == ["child_processes"], result.message
        assert "uncontained" not in result.flags
    else:
        assert "uncontained" in result.flags and "escapable" in result.isolation.containment_detail
        verdict = judged_on_relu("honest/relu_exact_copy.py", backend)
        assert verdict.status == "correct" and "uncontained" in verdict.flags


@pytest.mark.parametrize("backend", ["bubblewrap", "unshare"])
@pytest.mark.parametrize("hack, status, rule", [("crash_sigkill_self.py", "runtime_error", None),
                                                ("child_daemonized_grandchild.py", "rejected", "child_processes")])
def test_a_candidate_meets_the_same_sandbox_under_either_backend(backend, hack, status, rule):
    """The worker is not its PID namespace's init under either backend. As init (unshare's child
    exec'ing the worker, seen on an H200) it ignored its own SIGKILL, so the self-killing
    candidate was judged correct, and it adopted the daemonized grandchild, which its guard then
    reported instead of the host's census."""
    from kernelopt.sandbox import isolation

    if not isolation.backend_works(backend):
        pytest.skip(f"the {backend} backend does not work here")
    result = judged_on_relu(f"hacks/{hack}", backend)
    assert result.status == status, result.message
    assert rule is None or result.rules[0] == rule, result.rules

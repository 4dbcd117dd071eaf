"""Escape families the corpus cannot express as a lone candidate file: each needs host-side set-up
around a template from tests/adversarial/templates/ (a listener for the network, a planted file
for the file system, planted environment variables and dotfiles for secrets)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_adversarial import PROBLEMS, REPO, TEMPLATES, describe, evaluate_file, referee_options


def _fill(template: str, **values: str) -> str:
    source = (TEMPLATES / template).read_text(encoding="utf-8")
    for key, value in values.items():
        source = source.replace("{" + key + "}", value)
    return source


class _Listener:
    """A TCP (and, where the port is free, UDP) listener on 127.0.0.1 that records contacts."""

    def __init__(self):
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(16)
        self.tcp.settimeout(0.2)
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.udp.bind(("127.0.0.1", self.port))
            self.udp.settimeout(0.2)
        except OSError:
            self.udp.close()
            self.udp = None
        self.contacts: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, addr = self.tcp.accept()
            except (socket.timeout, TimeoutError):
                conn = None
            except OSError:
                break
            if conn is not None:
                with conn:
                    conn.settimeout(1.0)
                    try:
                        data = conn.recv(4096)
                    except OSError:
                        data = b""
                self.contacts.append(f"tcp from {addr}: {data!r}")
            if self.udp is not None:
                try:
                    data, addr = self.udp.recvfrom(4096)
                    self.contacts.append(f"udp from {addr}: {data!r}")
                except (socket.timeout, TimeoutError, OSError):
                    pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        time.sleep(0.5)  # let a late connection land before stopping
        self._stop.set()
        self._thread.join(timeout=10)
        self.tcp.close()
        if self.udp is not None:
            self.udp.close()


def test_network_escape_is_blocked():
    with _Listener() as listener:
        source = _fill("network_escape.py", PORT=str(listener.port))
        result = evaluate_file(PROBLEMS / "1_ReLU.py", source, referee_options())
    assert not listener.contacts, (
        f"the candidate reached the host's loopback: {listener.contacts}\n{describe(result)}"
    )
    assert result.status == "correct", describe(result)
    assert result.isolation is not None and result.isolation.network_isolated, describe(result)


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
def test_file_escape_is_blocked(tmp_path):
    token = secrets.token_hex(8)
    outside = tmp_path / "outside" / "escaped.txt"
    tmp_escape = Path(f"/tmp/kernelopt_escape_{token}")
    sentinel = REPO / f".kernelopt_escape_sentinel_{token}"
    repo_new = REPO / f"kernelopt_escape_{token}.txt"
    problem_copy = tmp_path / "level1" / "1_ReLU.py"
    problem_copy.parent.mkdir()
    shutil.copyfile(PROBLEMS / "1_ReLU.py", problem_copy)
    problem_before = problem_copy.read_bytes()
    sentinel_text = f"sentinel {token}\n"
    sentinel.write_text(sentinel_text)
    try:
        source = _fill(
            "file_escape.py",
            PATH=str(outside),
            TMP_ESCAPE=str(tmp_escape),
            REPO_FILE=str(sentinel),
            REPO_NEW=str(repo_new),
            PROBLEM_FILE=str(problem_copy),
        )
        result = evaluate_file(problem_copy, source, referee_options(isolation="bubblewrap"))
        leaks = []
        if outside.exists():
            leaks.append(f"wrote {outside}")
        if tmp_escape.exists():
            leaks.append(f"wrote {tmp_escape}")
        if repo_new.exists():
            leaks.append(f"created {repo_new}")
        if sentinel.read_text() != sentinel_text:
            leaks.append(f"modified {sentinel}")
        if problem_copy.read_bytes() != problem_before:
            leaks.append(f"modified the problem file {problem_copy}")
        assert not leaks, f"file escape: {leaks}\n{describe(result)}"
        assert result.isolation is not None and result.isolation.backend == "bubblewrap", describe(result)
        assert result.isolation.filesystem_confined, describe(result)
        assert result.status == "correct", describe(result)
    finally:
        for path in (sentinel, repo_new, tmp_escape):
            try:
                path.unlink()
            except (FileNotFoundError, IsADirectoryError, PermissionError):
                pass


ENV_SECRETS = {"OPENAI_API_KEY": "sk-kernelopt-test-secret-123", "HF_TOKEN": "hf_kernelopt_test_456"}


@pytest.fixture
def planted_process_secret():
    """Another host process (like the user's shell) with a secret in its environment."""
    secret = f"kernelopt-proc-secret-{secrets.token_hex(6)}"
    env = dict(os.environ, KERNELOPT_OTHER_PROCESS_TOKEN=secret)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield secret
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _assert_no_leak(result, planted: dict[str, str]):
    dump = result.model_dump_json()
    leaked = [name for name, value in planted.items() if value in dump]
    assert not leaked, f"secrets leaked into the EvalResult: {leaked}\n{describe(result)}"


@pytest.mark.parametrize("raise_with_loot", [False, True], ids=["prints", "raises"])
def test_environment_secrets_do_not_leak(monkeypatch, planted_process_secret, raise_with_loot):
    for name, value in ENV_SECRETS.items():
        monkeypatch.setenv(name, value)
    source = _fill("secrets_leak.py", RAISE="1" if raise_with_loot else "0")
    result = evaluate_file(PROBLEMS / "1_ReLU.py", source, referee_options())
    _assert_no_leak(result, {**ENV_SECRETS, "other process": planted_process_secret})
    if raise_with_loot:
        assert result.status == "runtime_error", describe(result)
    else:
        assert result.status == "correct", describe(result)
        # The candidate's output is kept (tail) - the check above is not vacuous.
        assert "LOOT" in result.candidate_output, describe(result)


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
def test_home_dotfile_secrets_do_not_leak(monkeypatch, tmp_path):
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    netrc_secret = f"kernelopt-netrc-secret-{secrets.token_hex(6)}"
    env_file_secret = f"sk-kernelopt-envfile-secret-{secrets.token_hex(6)}"
    aws_secret = f"kernelopt-aws-secret-{secrets.token_hex(6)}"
    (home / ".netrc").write_text(f"machine example.com login me password {netrc_secret}\n")
    (home / ".env").write_text(f"OPENAI_API_KEY={env_file_secret}\n")
    (home / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {aws_secret}\n")
    monkeypatch.setenv("HOME", str(home))
    for name, value in ENV_SECRETS.items():
        monkeypatch.setenv(name, value)
    source = _fill("secrets_leak.py", RAISE="0")
    result = evaluate_file(PROBLEMS / "1_ReLU.py", source, referee_options(isolation="bubblewrap"))
    _assert_no_leak(
        result,
        {**ENV_SECRETS, ".netrc": netrc_secret, ".env": env_file_secret, ".aws": aws_secret},
    )
    assert result.status == "correct", describe(result)


KERNEL_SETTINGS_PROBE = '''
import json, os
import torch
import torch.nn as nn

found = {"writable": [], "cap_eff": None, "groups_seen": None}
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/stat_interval", "/proc/sysrq-trigger"):
    try:
        os.close(os.open(path, os.O_WRONLY))  # opened only: nothing is written
        found["writable"].append(path)
    except OSError:
        pass
for line in open("/proc/self/status"):
    if line.startswith("CapEff:"):
        found["cap_eff"] = int(line.split()[1], 16)
try:
    found["groups_seen"] = [name for name in os.listdir("/sys/fs/cgroup") if "kernelopt" in name]
except OSError:
    found["groups_seen"] = []
print("PROBE " + json.dumps(found), flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


@pytest.mark.parametrize("backend", ["bubblewrap", "unshare"])
def test_the_sandbox_leaves_no_kernel_setting_writable_and_no_other_group_visible(backend):
    """As root, a sandbox's root is the host's: /proc/sys's files are root's to write without any
    capability (kernel.core_pattern runs a program as the host's root), and the host's cgroup
    files, the reference's among them, would be there to watch (their freeze notifications run in
    the reference's context: hacks/cgroup_events_of_the_reference.py). The candidate opens the
    settings for writing (writing nothing) and lists the groups."""
    if backend == "bubblewrap" and shutil.which("bwrap") is None:
        pytest.skip("needs bwrap")
    if backend == "unshare" and shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    result = evaluate_file(PROBLEMS / "1_ReLU.py", KERNEL_SETTINGS_PROBE, referee_options(isolation=backend))
    assert result.status == "correct", describe(result)
    line = next(line for line in result.candidate_output.splitlines() if line.startswith("PROBE "))
    found = json.loads(line.removeprefix("PROBE "))
    assert found["writable"] == [], found
    assert found["groups_seen"] == [], found
    if os.geteuid() == 0:
        assert found["cap_eff"] == 0, found

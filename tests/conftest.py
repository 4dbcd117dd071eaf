"""Shared fixtures. GPU tests carry the `gpu` marker and skip without CUDA."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "level1"

# Candidates for examples/level1/4_RedundantSoftmax.py, written as forward's body (tests of the
# search, sessions and agents): broken, as fast as the reference, faster (no wasted product).
SOFTMAX_PROGRAM = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
{body}
"""
SOFTMAX_BROKEN = SOFTMAX_PROGRAM.format(body="        return torch.sofmax(x, dim=-1)  # misspelt")
SOFTMAX_EQUAL = SOFTMAX_PROGRAM.format(body="        unused = x.t() @ x\n        return torch.softmax(x, dim=-1)")
SOFTMAX_FAST = SOFTMAX_PROGRAM.format(body="        return torch.softmax(x, dim=-1)")
KERNELOPT = str(Path(sys.executable).parent / "kernelopt")


def as_terminal_job(command: list[str]) -> list[str]:
    """`command` started as a terminal's foreground job is, with SIGINT's default action. A
    shell without job control starts its background jobs with SIGINT ignored, and the ignoring is
    inherited across exec: a test suite run that way (`bash .ci/run &`, nohup) would otherwise
    send a Ctrl-C that the command, rightly, never sees."""
    restore = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
               "os.execv(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-c", restore, *command]


def optimize_environment() -> dict:
    """The environment of a `kernelopt optimize` subprocess against the loopback LLM server."""
    env = dict(os.environ, OPENAI_API_KEY="test-key")
    env.pop("OPENAI_BASE_URL", None)
    return env


def optimize_killed_at_third_call(server, release: threading.Event, store: Path,
                                  args: list[str]) -> tuple[sqlite3.Connection, str, list]:
    """`kernelopt optimize ARGS` (the problem, strategy, budget, referee options) against
    `server`, SIGKILLed once it has sent its third LLM request: the server's script holds that
    reply until `release`, which is set after the kill. (the store, the run's id, the
    evaluations stored before the kill: id, code hash, created.)"""
    command = [KERNELOPT, "optimize", *args, "--model", "test-model", "--base-url", server.url,
               "--store", str(store), "--json"]
    first = subprocess.Popen(command, env=optimize_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(server.requests) < 3 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.1)
    assert len(server.requests) == 3, first.communicate()[1][-2000:]
    first.send_signal(signal.SIGKILL)
    first.wait()
    release.set()
    db = sqlite3.connect(store)
    (run_id,) = db.execute("SELECT id FROM runs").fetchone()
    return db, run_id, db.execute("SELECT id, code_hash, created FROM evaluations ORDER BY id").fetchall()


def resume_optimize(store: Path, run_id: str) -> subprocess.CompletedProcess:
    """`kernelopt optimize --resume RUN_ID --json` run to its end."""
    return subprocess.run([KERNELOPT, "optimize", "--resume", run_id, "--store", str(store), "--json"],
                          env=optimize_environment(), capture_output=True, text=True, timeout=300)


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _cuda_build_available() -> bool:
    """The CUDA build of torch and nvcc: CUDA sources compile (nothing needs to run)."""
    try:
        import torch

        return torch.version.cuda is not None and shutil.which("nvcc") is not None
    except ImportError:
        return False


@pytest.fixture(scope="session", autouse=True)
def _private_build_cache(tmp_path_factory):
    """Extension builds made by the tests go to a cache of the test session, not the user's."""
    import os

    previous = os.environ.get("KERNELOPT_BUILD_CACHE")
    os.environ["KERNELOPT_BUILD_CACHE"] = str(tmp_path_factory.mktemp("build-cache"))
    yield
    if previous is None:
        os.environ.pop("KERNELOPT_BUILD_CACHE", None)
    else:
        os.environ["KERNELOPT_BUILD_CACHE"] = previous


def pytest_collection_modifyitems(config, items):
    skips = {
        "gpu": (_cuda_available(), "needs a CUDA device"),
        "bwrap": (shutil.which("bwrap") is not None, "needs bubblewrap (scripts/setup.sh installs it)"),
        "cuda_build": (_cuda_build_available(), "needs the CUDA build of torch and nvcc"),
    }
    for item in items:
        for marker, (available, reason) in skips.items():
            if marker in item.keywords and not available:
                item.add_marker(pytest.mark.skip(reason=reason))


@functools.lru_cache(maxsize=None)
def docker_sandbox_missing() -> str:
    """Why the `docker` tests cannot run here ("" when they can): the SDK, a daemon (DOCKER_HOST;
    scripts/docker_tests.sh starts a private one) and the sandbox image with this checkout's
    worker protocol (scripts/docker_image.sh builds it)."""
    try:
        from kernelopt.sandbox import containers

        containers.connect(containers.DEFAULT_IMAGE, "cpu")
    except Exception as exc:  # noqa: BLE001 - any reason is a reason to skip (or, in CI, to fail)
        return f"needs a Docker daemon and the {DEFAULT_DOCKER_IMAGE} image: {exc}"
    return ""


DEFAULT_DOCKER_IMAGE = "kernelopt-sandbox"


@pytest.fixture(autouse=True)
def _docker_sandbox(request):
    """`docker`-marked tests skip where no daemon or image is present, saying why; in CI (CI set)
    they fail instead, so a broken CI docker step cannot pass as skips."""
    if request.node.get_closest_marker("docker") is None:
        yield
        return
    missing = docker_sandbox_missing()
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI runs the docker tests against a real daemon (scripts/docker_tests.sh): {missing}")
    if missing:
        pytest.skip(missing)
    request.getfixturevalue("_no_containers_left")
    yield


@pytest.fixture(scope="session")
def _no_containers_left():
    """After the docker tests, no container of this process is left behind (under a private
    daemon, KERNELOPT_DOCKER_PRIVATE=1: none at all, whoever made it)."""
    yield
    import socket

    import docker

    from kernelopt.sandbox import containers

    client = docker.from_env()
    owner = f"{socket.gethostname()}:{os.getpid()}"
    deadline = time.monotonic() + 15  # a removal still under way
    while True:
        left = [c for c in client.containers.list(all=True)
                if os.environ.get("KERNELOPT_DOCKER_PRIVATE") == "1" or c.labels.get(containers.OWNER_LABEL) == owner]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"containers left behind: {[(c.short_id, c.status, c.labels) for c in left]}"


@pytest.fixture
def example():
    """Path of an example problem by file stem, e.g. example('1_ReLU')."""
    return lambda stem: EXAMPLES / f"{stem}.py"


@pytest.fixture
def fast_options():
    """Evaluation options that keep CPU tests quick without weakening any check."""
    from kernelopt.sandbox import EvalOptions

    def make(**overrides):
        settings = dict(device="cpu", timing_budget=2.0, min_timed_calls=5, timeout=120)
        settings.update(overrides)
        return EvalOptions(**settings)

    return make


@pytest.fixture(scope="module")
def service_url():
    """`kernelopt serve`'s service on loopback over examples/level1, one per test module, with
    quick CPU settings: the reward adapters', trainers' and RL environments' tests call it."""
    from kernelopt.kernelbench import load_problem_set
    from kernelopt.rewards.service import RewardService, start_server
    from kernelopt.sandbox import EvalOptions

    options = EvalOptions(device="cpu", timing_budget=0.3, correctness_trials=2, warmup_calls=1, min_timed_calls=3,
                          timeout=120)
    problems = load_problem_set(EXAMPLES).problems
    server = start_server(RewardService(problems, options, jobs=2, queue_size=16, request_timeout=300))
    yield server.url
    server.stop()


class CharTokenizer:
    """A stand-in for an HF tokenizer in the trainers' tests: one token per character, 0 the
    padding (a special token)."""

    def __call__(self, text, add_special_tokens=False, return_tensors="pt"):
        import torch

        return {"input_ids": torch.tensor([[ord(c) for c in text]])}

    def decode(self, ids, skip_special_tokens=False):
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return "".join(chr(i) for i in ids if i or not skip_special_tokens)


class ScriptedEngine:
    """A stand-in for OpenRLHF's vLLM engine: answers from a script (one character a token) and
    records the prompt it was given each time."""

    def __init__(self, answers):
        self.answers, self.seen = list(answers), []

    async def generate(self, token_ids, sampling_params, multi_modal_data=None):
        import types

        self.seen.append("".join(chr(i) for i in token_ids))
        text = self.answers.pop(0)
        output = types.SimpleNamespace(token_ids=[ord(c) for c in text], text=text, finish_reason="stop",
                                       logprobs=None)
        return types.SimpleNamespace(outputs=[output])

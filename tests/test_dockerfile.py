"""The sandbox image's recipe: what it must hold and promise (building it needs a daemon)."""

from __future__ import annotations

import re

from conftest import REPO

from kernelopt.sandbox.worker import wire

DOCKERFILE = (REPO / "Dockerfile").read_text()


def test_the_image_announces_the_worker_protocol_the_host_speaks():
    label = re.search(r'LABEL org\.kernelopt\.worker-protocol="(\d+)"', DOCKERFILE)
    assert label and int(label.group(1)) == wire.PROTOCOL_VERSION


def test_the_image_runs_as_an_unprivileged_user_and_holds_only_the_worker():
    assert re.search(r"^USER sandbox$", DOCKERFILE, re.M)
    copies = re.findall(r"^COPY (\S+)", DOCKERFILE, re.M)
    assert copies == ["kernelopt/sandbox/worker/"]
    ignore = (REPO / ".dockerignore").read_text().split()
    assert ignore[:2] == ["*", "!kernelopt/sandbox/worker/"] or ("*" in ignore and "!kernelopt/sandbox/worker/" in ignore)


def test_the_image_has_what_candidates_build_and_run_with():
    for needed in ("torch==${TORCH_VERSION}", "ninja", "${CUPY}", "g++"):
        assert needed in DOCKERFILE
    cuda = re.search(r"ARG CUDA_IMAGE=nvidia/cuda:(\d+)\.\d+\.\d+-devel", DOCKERFILE)
    index = re.search(r"ARG TORCH_INDEX=\S+/cu(\d+)", DOCKERFILE)
    assert cuda and index and index.group(1).startswith(cuda.group(1)), "toolkit and torch CUDA must match"

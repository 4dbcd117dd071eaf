"""The sandbox image's recipe: what it must hold and promise (building it needs a daemon: the
`docker`-marked tests run against an image scripts/docker_image.sh built)."""

from __future__ import annotations

import re

from conftest import REPO

from kernelopt.sandbox.worker import wire

DOCKERFILE = (REPO / "Dockerfile").read_text()
FINAL_STAGE = DOCKERFILE.rsplit("\nFROM ", 1)[1]


def test_the_image_announces_the_worker_protocol_the_host_speaks():
    label = re.search(r'LABEL org\.kernelopt\.worker-protocol="(\d+)"', FINAL_STAGE)
    assert label and int(label.group(1)) == wire.PROTOCOL_VERSION


def test_the_image_runs_as_an_unprivileged_user_and_holds_only_the_worker():
    assert re.search(r"^USER sandbox$", FINAL_STAGE, re.M)
    copies = re.findall(r"^COPY (\S+)", FINAL_STAGE, re.M)
    assert copies == ["--from=venv", "kernelopt/sandbox/worker/"], "the image holds the worker and the venv"
    assert re.findall(r"^COPY (\S+)", DOCKERFILE, re.M).count("wheelhouse/") == 1, "wheels: build stage only"
    ignore = (REPO / ".dockerignore").read_text().split()
    assert "*" in ignore and "!kernelopt/sandbox/worker/" in ignore and "!wheelhouse/" in ignore
    assert (REPO / "wheelhouse" / "README.md").is_file(), "the build context's wheelhouse/ always exists"


def test_no_registry_but_a_plain_base_and_package_indexes():
    """No nvidia/cuda base: the toolkit comes as wheels, the base is a slim Debian by default."""
    assert "nvidia/cuda" not in DOCKERFILE
    assert re.search(r"^ARG BASE=(debian|ubuntu):\S+$", DOCKERFILE, re.M)
    assert re.search(r"^FROM \$\{BASE\} AS base$", DOCKERFILE, re.M)


def test_the_image_has_what_candidates_build_and_run_with():
    for needed in ("torch==$TORCH_VERSION", "ninja", "$CUPY", "g++", "libjemalloc2"):
        assert needed in DOCKERFILE
    packages = re.search(r'^ARG CUDA_PACKAGES="(.*)"$', DOCKERFILE, re.M)
    assert packages and set(packages.group(1).split()) >= {"nvidia-cuda-nvcc", "nvidia-cuda-runtime",
                                                           "nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-nvvm"}
    cuda = re.search(r"^ARG CUDA_VERSION=(\d+)\.\d+$", DOCKERFILE, re.M)
    cupy = re.search(r"^ARG CUPY=cupy-cuda(\d+)x$", DOCKERFILE, re.M)
    assert cuda and cupy and cuda.group(1) == cupy.group(1), "the toolkit's and CuPy's CUDA must match"
    assert "CUDA_HOME=/opt/venv/cuda" in FINAL_STAGE, "load_inline finds the toolkit of the wheels"
    assert re.search(r'FLAVOUR" = cpu', DOCKERFILE) and "download.pytorch.org/whl/cpu" in DOCKERFILE


def test_an_offline_build_installs_only_from_the_wheelhouse():
    assert "--no-index --find-links /tmp/wheelhouse" in DOCKERFILE

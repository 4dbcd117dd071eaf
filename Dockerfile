# The sandbox image: untrusted candidates run here (docs/sandbox.md, "The image").
#
#   docker build -t kernelopt-sandbox .                                   # GPU flavour (CUDA 13)
#   docker build --build-arg FLAVOUR=cpu -t kernelopt-sandbox .           # CPU flavour
#   bash scripts/docker_image.sh --flavour cpu                            # offline, from a wheelhouse
#
# Nothing comes from NVIDIA's container registry: the base is a plain Debian (any Debian or
# Ubuntu with apt works: --build-arg BASE=ubuntu:24.04), and the CUDA toolkit comes the way
# torch's own wheels bring CUDA, as Python packages (nvcc, the runtime, CCCL, the compiler's
# headers, NVVM) into the image's virtual environment. The host's driver is all a GPU job needs
# from outside (the NVIDIA Container Toolkit mounts it). Candidates' load_inline/load builds use
# that toolkit and the image's g++ and ninja; NVRTC (a torch dependency) and CuPy (--backend
# cupy) compile raw kernels; Triton comes with torch's CUDA wheel (--backend triton).
#
# The image holds the worker code only (kernelopt/sandbox/worker: the standard library, torch
# and its own modules), never the host's code, keys or run store.
#
# Offline: wheels placed in ./wheelhouse/ (scripts/docker_image.sh downloads them on the host)
# are installed with --no-index, nothing else is fetched; then the base must already hold
# python3, python3-venv, python3-dev, g++ and libjemalloc2 (scripts/docker_base.sh builds one from Debian's
# packages), and `docker build --network none` works.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS base
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# What candidates build and run with, from the base's own packages (none fetched when present).
RUN missing=""; \
    for package in python3 python3-venv python3-dev g++ libjemalloc2; do \
      dpkg -s "$package" >/dev/null 2>&1 || missing="$missing $package"; \
    done; \
    if [ -n "$missing" ]; then \
      apt-get update && apt-get install -y --no-install-recommends $missing && rm -rf /var/lib/apt/lists/*; \
    fi

# torch, ninja, numpy and (GPU) the CUDA toolkit's and CuPy's wheels, in a stage of their own so
# that the wheelhouse never reaches the image.
FROM base AS venv
# gpu: torch's CUDA wheel + the toolkit's wheels + CuPy; cpu: torch's CPU wheel.
ARG FLAVOUR=gpu
ARG TORCH_VERSION=2.14.1
# Where torch comes from: empty = PyPI (whose Linux torch is the CUDA 13 build) for gpu,
# https://download.pytorch.org/whl/cpu for cpu. Another CUDA line: change all three below, e.g.
# --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 --build-arg CUDA_VERSION=12.8 ...
ARG TORCH_INDEX=
# torch's CUDA version: the toolkit's wheels must be of the same line (13.x: the nvidia/cu13 tree).
ARG CUDA_VERSION=13.0
ARG CUDA_PACKAGES="nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cuda-crt nvidia-nvvm"
ARG CUPY=cupy-cuda13x
# A package mirror or proxy: --build-arg PIP_INDEX_URL=... (HTTPS_PROXY is a predefined argument).
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
COPY wheelhouse/ /tmp/wheelhouse/
RUN set -eu; \
    python3 -m venv /opt/venv; \
    pip="/opt/venv/bin/pip install"; \
    if ls /tmp/wheelhouse/*.whl >/dev/null 2>&1; then \
      echo "installing offline from the wheelhouse"; pip="$pip --no-index --find-links /tmp/wheelhouse"; \
    fi; \
    if [ "$FLAVOUR" = cpu ]; then \
      case "$TORCH_VERSION" in *+*) torch="torch==$TORCH_VERSION" ;; *) torch="torch==$TORCH_VERSION+cpu" ;; esac; \
      index="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"; \
      $pip --extra-index-url "$index" "$torch" ninja numpy; \
    elif [ "$FLAVOUR" = gpu ]; then \
      toolkit=""; for package in $CUDA_PACKAGES; do toolkit="$toolkit $package==$CUDA_VERSION.*"; done; \
      $pip ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "torch==$TORCH_VERSION" ninja numpy $toolkit "$CUPY"; \
      nvcc=$(find /opt/venv -path '*/bin/nvcc' -type f | head -n 1); \
      [ -n "$nvcc" ] || { echo "no nvcc among the toolkit's wheels" >&2; exit 1; }; \
      root=$(dirname "$(dirname "$nvcc")"); \
      ln -s "$root" /opt/venv/cuda; \
      [ -e "$root/lib64" ] || ln -s lib "$root/lib64"; \
      for library in "$root"/lib/lib*.so.[0-9]*; do \
        [ -e "$library" ] || continue; unversioned="${library%.so.*}.so"; \
        [ -e "$unversioned" ] || ln -s "$(basename "$library")" "$unversioned"; \
      done; \
    else \
      echo "FLAVOUR must be gpu or cpu, not $FLAVOUR" >&2; exit 1; \
    fi; \
    /opt/venv/bin/python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; \
    find /opt/venv -name __pycache__ -prune -exec rm -rf {} +

FROM base
COPY --from=venv /opt/venv /opt/venv
# /opt/venv/cuda is the toolkit's root in the GPU flavour (absent in the CPU flavour).
ENV PATH=/opt/venv/bin:/opt/venv/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CUDA_HOME=/opt/venv/cuda \
    CUDA_PATH=/opt/venv/cuda

# The worker protocol this image speaks; the host refuses an image whose number differs from
# kernelopt/sandbox/worker/wire.py's PROTOCOL_VERSION (tests/test_dockerfile.py keeps them equal).
LABEL org.kernelopt.worker-protocol="7"
ARG FLAVOUR=gpu
LABEL org.kernelopt.flavour="${FLAVOUR}"
COPY kernelopt/sandbox/worker/ /opt/kernelopt/worker/

# Candidates run as this unprivileged user; /scratch is where each job's directory is made.
# (Ubuntu's images ship a user 1000, "ubuntu": it gives its uid to ours.)
RUN (userdel --remove ubuntu 2>/dev/null || true) \
 && useradd --uid 1000 --create-home --shell /usr/sbin/nologin sandbox \
 && mkdir -p /scratch && chown sandbox:sandbox /scratch
USER sandbox
WORKDIR /scratch

# The host starts each container with the worker as its command (containers.worker_command).
CMD ["sleep", "infinity"]

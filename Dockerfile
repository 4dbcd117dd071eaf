# The GPU sandbox image: untrusted candidates run here (docs/sandbox.md).
#
#   docker build -t kernelopt-sandbox .
#
# It holds the worker code only (kernelopt/sandbox/worker: the standard library, torch and
# its own modules), never the host's code, keys or run store. The CUDA toolkit matches the
# CUDA build of torch, so candidates' load_inline/load builds work inside it; ninja builds
# them, CuPy serves raw-kernel (NVRTC) candidates (--backend cupy; in a container they compile
# in the worker, in memory only) and Triton comes with torch's CUDA wheel (--backend triton).
# Change both CUDA versions together:
#   docker build --build-arg CUDA_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04 \
#                --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 \
#                --build-arg CUPY=cupy-cuda12x -t kernelopt-sandbox .
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

ARG TORCH_VERSION=2.14.1
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130
ARG CUPY=cupy-cuda13x

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv g++ libjemalloc2 \
 && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
 && /opt/venv/bin/pip install ninja numpy "${CUPY}"

ENV PATH=/opt/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CUDA_HOME=/usr/local/cuda

# The worker protocol this image speaks; the host refuses an image whose number differs from
# kernelopt/sandbox/worker/wire.py's PROTOCOL_VERSION (tests/test_dockerfile.py keeps them equal).
LABEL org.kernelopt.worker-protocol="4"
COPY kernelopt/sandbox/worker/ /opt/kernelopt/worker/

# Candidates run as this unprivileged user; /scratch is where each job's directory is made.
# (Ubuntu's images ship a user 1000, "ubuntu": it gives its uid to ours.)
RUN (userdel --remove ubuntu 2>/dev/null || true) \
 && useradd --uid 1000 --create-home --shell /usr/sbin/nologin sandbox \
 && mkdir -p /scratch && chown sandbox:sandbox /scratch
USER sandbox
WORKDIR /scratch

# The container idles; the host starts a fresh worker process per job with `docker exec`.
CMD ["sleep", "infinity"]

#!/usr/bin/env bash
# Sets up kernelopt in ./.venv: torch (CPU build unless a GPU is present or KERNELOPT_TORCH says
# otherwise), the package with its test extras, and bubblewrap for the sandbox when possible.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PIP=".venv/bin/python -m pip"

if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  if [ -n "${KERNELOPT_TORCH:-}" ]; then
    spec=$KERNELOPT_TORCH
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    spec=torch            # a CUDA build
  else
    spec=torch==2.13.0    # the CPU build is enough without a GPU
  fi
  echo "installing $spec (a few minutes on a fresh machine: torch is large)"
  $PIP install -q "$spec"
fi
$PIP install -q -e '.[dev]'

# The cupy and triton backends (docs/builds.md). CuPy: the wheel for torch's CUDA major version
# (CUDA 13 without a GPU: it imports without one, for the tests of the worker's hook). NVRTC: the
# host compiles CuPy kernels with it; torch's CUDA wheels bring it, a CPU machine gets the wheel.
# Triton: torch's CUDA wheels bring it; only a GPU machine needs it.
cuda_major=$(.venv/bin/python -c "import torch; print((torch.version.cuda or '13').split('.')[0])")
gpu_torch=$(.venv/bin/python -c "import torch; print(int(torch.version.cuda is not None))")
if ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('cupy') is None)"; then
  $PIP install -q "cupy-cuda${cuda_major}x" || echo "note: could not install cupy-cuda${cuda_major}x; --backend cupy is unavailable" >&2
fi
if ! .venv/bin/python -c "import sys; from kernelopt.sandbox.nvrtc import find_libnvrtc; sys.exit(find_libnvrtc() is None)"; then
  $PIP install -q nvidia-cuda-nvrtc || echo "note: could not install nvidia-cuda-nvrtc; CuPy kernels compile in the workers, uncached" >&2
fi
if [ "$gpu_torch" = 1 ] && ! .venv/bin/python -c "import triton" >/dev/null 2>&1; then
  $PIP install -q triton || echo "note: could not install triton; --backend triton is unavailable" >&2
fi

# bubblewrap: the sandbox's strongest backend. Without it kernelopt falls back (and says so).
if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
      || echo "warning: could not install bubblewrap; the sandbox will use a weaker backend" >&2
  else
    echo "note: install bubblewrap (e.g. 'sudo apt-get install bubblewrap') for full isolation" >&2
  fi
fi
# jemalloc: both workers allocate through it, which steadies CPU timings (docs/referee.md).
if ! ls /usr/lib/*/libjemalloc.so.2 /usr/lib64/libjemalloc.so.2 >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get install -y -qq libjemalloc2 || (apt-get update -qq && apt-get install -y -qq libjemalloc2)) \
      >/dev/null 2>&1 || echo "note: could not install libjemalloc2; CPU timings are noisier without it" >&2
  else
    echo "note: install jemalloc (e.g. 'sudo apt-get install libjemalloc2') for steadier CPU timings" >&2
  fi
fi
# Chromium and its driver: the tune workbench's browser tests (tests/test_tune_browser.py, through
# selenium from the dev extra) skip without them.
if ! command -v chromedriver >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get install -y -qq chromium chromium-driver \
      || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)) >/dev/null 2>&1 \
      || echo "note: could not install chromium; the workbench's browser tests will skip" >&2
  else
    echo "note: install chromium and chromium-driver (e.g. 'sudo apt-get install chromium chromium-driver') for the workbench's browser tests" >&2
  fi
fi
echo "kernelopt is set up: .venv/bin/kernelopt --help"

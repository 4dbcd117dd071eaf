#!/usr/bin/env bash
# The wheels a lent GPU machine needs beyond its image (Python 3.12, no network there), at the
# versions this checkout's venv runs, into .whl/ (ignored by git; carry it with the device call).
# scripts/gpu_acceptance.sh installs them with --no-index. The image (docs/gpu.md) already has
# torch, numpy, jinja2, rich, pygments, ninja, httpx, anyio, h11, certifi, requests, tqdm, pytest,
# pytest-xdist and hypothesis; openai 3.x needs httpx2 (not httpx), which the image lacks. py-spy
# is for gpu_acceptance.sh's `spy` phase (a sampling profiler: a binary wheel, no dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-.venv/bin/pip}  # the venv whose versions to match
PACKAGES="pydantic pydantic_core annotated-types typing-inspection typing_extensions openai httpx2 httpcore2
  truststore jiter sniffio tenacity fastapi starlette uvicorn py-spy"
pins=()
for name in $PACKAGES; do
  version=$("$PIP" show "$name" 2>/dev/null | sed -n "s/^Version: //p" || true)
  pins+=("$name${version:+==$version}")
done
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.whl/' >> .git/info/exclude; }
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${pins[@]}"
ls .whl

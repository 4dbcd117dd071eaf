#!/usr/bin/env bash
# Sets up (idempotent) and runs the test suite. GPU tests skip without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"

#!/usr/bin/env bash
# Static checks (pyproject.toml configures both): ruff over the code, the tests and the
# benchmarks; mypy over all of kernelopt (tool.mypy's files, less its commented exclusions).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check kernelopt/ tests/ benchmarks/
.venv/bin/mypy

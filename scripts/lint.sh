#!/usr/bin/env bash
# Static checks (pyproject.toml configures both): ruff over the code, the tests and the
# benchmarks; mypy over the packages listed in tool.mypy's files (kernelopt/sandbox and
# kernelopt/rewards, whole).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check kernelopt/ tests/ benchmarks/
.venv/bin/mypy

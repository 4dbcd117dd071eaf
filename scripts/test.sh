#!/usr/bin/env bash
# Sets up (idempotent) and runs the test suite. GPU tests skip without CUDA.
#   bash scripts/test.sh          the quick suite: everything but the `slow` extension compiles
#   bash scripts/test.sh --all    everything (what CI runs)
# Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
select=(-m "not slow")
if [ "${1:-}" = "--all" ]; then
  shift
  select=()
fi
exec .venv/bin/python -m pytest -q "${select[@]}" "$@"

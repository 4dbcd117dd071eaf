#!/usr/bin/env bash
# Sets up (idempotent) and runs the test suite. GPU tests skip without CUDA.
#   bash scripts/test.sh          the quick suite: everything but the `slow` extension compiles
#   bash scripts/test.sh --all    everything (what CI runs), then the RL environments' tests again
#                                 with verifiers and openrlhf installed beside it (scripts/setup_rl_envs.sh)
# Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
select=(-m "not slow")
all=0
if [ "${1:-}" = "--all" ]; then
  shift
  select=()
  all=1
fi
if [ "$all" = 0 ]; then
  exec .venv/bin/python -m pytest -q "${select[@]}" "$@"
fi
.venv/bin/python -m pytest -q "$@"
# The trainers' own calling code (verifiers, OpenRLHF's executor) with their packages on the path
# for this file only; the main run above skipped those tests.
bash scripts/setup_rl_envs.sh
PYTHONPATH=.rl-envs .venv/bin/python -m pytest -q tests/test_environments.py -k "verifiers or openrlhf_executor" -rs

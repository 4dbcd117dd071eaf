#!/usr/bin/env bash
# Sets up (idempotent) and runs the test suite. GPU tests skip without CUDA.
#   bash scripts/test.sh          the quick suite: everything but the `slow` extension compiles
#   bash scripts/test.sh --all    everything (what CI runs), then the RL environments' tests again
#                                 with verifiers and openrlhf installed beside it (scripts/setup_rl_envs.sh),
#                                 and tests/test_trainers_real.py once per pair of trainer versions
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
# The slowest tests listed at the end: where CI's time goes (about 40 minutes is the budget).
.venv/bin/python -m pytest -q --durations=30 "$@"
# The trainers' own calling code (verifiers, OpenRLHF's executor) with their packages on the path
# for this file only; the main run above skipped those tests.
bash scripts/setup_rl_envs.sh
PYTHONPATH=.rl-envs .venv/bin/python -m pytest -q tests/test_environments.py -k "verifiers or openrlhf_executor" -rs
# verl's and OpenRLHF's reward-calling code, one version line of each per run; KERNELOPT_TRAINERS
# turns a skip of a named line (a broken install) into a failure.
KERNELOPT_TRAINERS="verl-0.9 openrlhf-0.11" PYTHONPATH=.rl-envs-verl:.rl-envs \
  .venv/bin/python -m pytest -q tests/test_trainers_real.py -rs
KERNELOPT_TRAINERS="verl-0.6 openrlhf-0.8" PYTHONPATH=.rl-envs-verl06:.rl-envs-openrlhf08 \
  .venv/bin/python -m pytest -q tests/test_trainers_real.py -rs

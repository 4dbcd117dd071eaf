#!/usr/bin/env bash
# The RL trainers' packages that tests/test_environments.py runs our environments through (they
# skip without them), installed WITHOUT their declared dependencies, which no pip extra can express,
# into ./.rl-envs (a folder put on PYTHONPATH for that test file only, so the main suite's
# environment is never changed by them; `scripts/test.sh --all`, what CI runs, does both): verifiers 0.3.1 pins mcp<2 (the dev extra has mcp 2.x) and
# openrlhf pulls vllm, ray and deepspeed. Only the light modules those tests import are added.
# About 40 s and 100 MB on top of the dev extra (measured: verifiers' set 87 MB, openrlhf's 16 MB).
#
# tests/test_trainers_real.py runs our verl and OpenRLHF adapters through the trainers' own
# reward-calling code, one version line per folder (two versions of a package cannot share one):
#   .rl-envs-verl       verl 0.9.1 (its reward loop also imports aiohttp, taken from .rl-envs)
#   .rl-envs-verl06     verl 0.6.1
#   .rl-envs-openrlhf08 openrlhf 0.8.11 (its remote RM client needs ray and requests: in the venv)
# verl declares ray, vllm-free but pinned transformers<5.11 and tensordict; its reward path needs
# only tensordict 0.10.0 (whose wheel imports with this torch) and the light modules below.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=.rl-envs
PIP=".venv/bin/python -m pip"
rm -rf "$TARGET" .rl-envs-verl .rl-envs-verl06 .rl-envs-openrlhf08
# verifiers 0.3.1 (its classic MultiTurnEnv API, verifiers.legacy) and what its import needs.
# The versions the tests were run with, pinned: without its dependency list pip checks nothing.
$PIP install -q --no-deps --target "$TARGET" verifiers==0.3.1 anthropic==2.14.0 aiolimiter==1.3.0 loguru==0.7.3 docstring_parser==0.18.0 \
  renderers==0.1.12 openai-harmony==0.0.8 prime-pydantic-config==0.4.3 tiktoken==0.14.0 httpx==0.28.1 httpcore==1.0.9 \
  prime-sandboxes==0.5.1 aiofiles==25.1.0 connectrpc==0.11.1 protobuf-py==0.1.1 protobuf-py-ext==0.1.1 pyqwest==0.12.0 \
  setproctitle==1.3.8 pyzmq==27.3.0 msgpack==1.2.4 tenacity==9.2.1
# openrlhf 0.11.2: openrlhf.utils.agent (MultiTurnAgentExecutor) imports torch, transformers, sympy,
# pylatexenc and aiohttp; vllm and ray are only needed by the trainer itself.
$PIP install -q --no-deps --upgrade --target "$TARGET" openrlhf==0.11.2 pylatexenc==2.11 aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 \
  frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1
PYTHONPATH="$TARGET" .venv/bin/python -c "import verifiers as vf, openrlhf.utils.agent; vf.MultiTurnEnv; print('RL environments: verifiers', vf.__version__, '+ openrlhf 0.11.2')"

# verl: the reward path imports tensordict, omegaconf and codetiming besides what the venv has.
VERL_LIGHT="tensordict==0.10.0 pyvers==0.1.0 cloudpickle==3.1.3 orjson==3.13.0 importlib_metadata==10.2.0 zipp==4.1.2 \
  omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 codetiming==1.4.0"
for pair in ".rl-envs-verl:0.9.1" ".rl-envs-verl06:0.6.1"; do
  folder=${pair%%:*} version=${pair##*:}
  # shellcheck disable=SC2086
  $PIP install -q --no-deps --target "$folder" "verl==$version" $VERL_LIGHT
  rm -rf "$folder/tests" "$folder/scripts"  # verl's wheel ships top-level test packages
done
$PIP install -q --no-deps --target .rl-envs-openrlhf08 openrlhf==0.8.11
PYTHONPATH=.rl-envs-verl:$TARGET .venv/bin/python -W ignore -c "import verl.experimental.reward_loop.reward_loop; print('verl', verl.__version__)"
PYTHONPATH=.rl-envs-verl06 .venv/bin/python -W ignore -c "import verl.trainer.ppo.reward; print('verl', verl.__version__)"
PYTHONPATH=.rl-envs-openrlhf08 .venv/bin/python -W ignore -c "import openrlhf.utils.remote_rm_utils; print('openrlhf 0.8.11 remote RM client')"

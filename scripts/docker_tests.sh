#!/usr/bin/env bash
# CI's docker step: the `docker`-marked tests against a real daemon and the CPU sandbox image.
#   bash scripts/docker_tests.sh [pytest arguments]
# 1. installs what it needs where it can (root with apt-get: docker.io, debootstrap);
# 2. starts a private dockerd (scripts/dockerd.sh: its own socket under a temporary directory,
#    no iptables, no bridge), stopped by its PID when this script ends, however it ends;
# 3. builds the CPU sandbox image offline (scripts/docker_image.sh: a Debian base made with
#    debootstrap, the wheels downloaded on this host); both are cached under
#    $KERNELOPT_DOCKER_CACHE (default ~/.cache/kernelopt/docker), so a second run builds nothing;
# 4. runs the `docker` tests (less `docker_gpu`: the GPU flavour's, for a GPU machine that built
#    it; the `docker_gpu_image` test skips, naming the command that builds the GPU flavour,
#    unless that image is there) with CI's rules (tests/conftest.py: a docker test that cannot run
#    fails instead of skipping under CI=true; no container may be left behind), then checks that
#    the daemon holds no container at all.
# DOCKER_HOST set and KERNELOPT_DOCKER_OWN_DAEMON=1: use that daemon instead of a private one.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing docker.io and debootstrap"
    (apt-get install -y -qq docker.io debootstrap || (apt-get update -qq && apt-get install -y -qq docker.io debootstrap)) \
      >/dev/null 2>&1 || { echo "could not install docker.io and debootstrap" >&2; exit 1; }
  else
    echo "the docker tests need dockerd and debootstrap (apt-get install docker.io debootstrap), as root" >&2
    exit 1
  fi
fi
if [ "${KERNELOPT_DOCKER_OWN_DAEMON:-}" != 1 ]; then
  dir=$(mktemp -d /tmp/kernelopt-dockerd.XXXXXX)
  trap 'bash scripts/dockerd.sh stop "$dir"; rm -rf "$dir"' EXIT
  DOCKER_HOST=$(bash scripts/dockerd.sh start "$dir")
  export DOCKER_HOST KERNELOPT_DOCKER_PRIVATE=1
fi
# Containers left by an earlier run that was killed (only a private daemon's: they are all ours).
if [ "${KERNELOPT_DOCKER_PRIVATE:-}" = 1 ] && [ -n "$(docker ps -aq)" ]; then
  docker rm -f $(docker ps -aq) >/dev/null
fi
bash scripts/docker_image.sh --flavour cpu
echo "docker step: daemon and image ready in $(( $(date +%s) - started )) s"
status=0
.venv/bin/python -m pytest -q -m "docker and not docker_gpu" -p no:cacheprovider --durations=8 tests/test_docker.py tests/test_docker_memory.py tests/test_adversarial_docker.py \
  tests/test_containers.py tests/test_doctor.py "$@" || status=$?
left=$(docker ps -aq)
if [ -n "$left" ]; then
  echo "containers left behind:" >&2
  docker ps -a >&2
  status=1
fi
echo "docker step: $(( $(date +%s) - started )) s in all"
exit $status

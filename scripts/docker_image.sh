#!/usr/bin/env bash
# Builds the sandbox image offline: the base from Debian's packages (scripts/docker_base.sh)
# unless --base names one, the Python wheels downloaded on this host into a cached wheelhouse,
# then `docker build --network none` with them (the Dockerfile installs from ./wheelhouse/).
#   bash scripts/docker_image.sh [--flavour cpu|gpu] [--tag NAME] [--base IMAGE] [--torch VERSION]
# Defaults: --flavour cpu, --tag kernelopt-sandbox, --base the one docker_base.sh makes, --torch the
# version in ./.venv for the CPU flavour (the host's and the image's torch then agree), else the
# Dockerfile's. The wheelhouse is kept in $KERNELOPT_DOCKER_CACHE
# (default ~/.cache/kernelopt/docker/wheelhouse-FLAVOUR-pyXY), so a second run downloads nothing
# new; an air-gapped cluster copies that directory over (docs/sandbox.md, "Offline").
# The GPU flavour beside the CPU one (the docker tests use kernelopt-sandbox):
#   bash scripts/docker_image.sh --flavour gpu --tag kernelopt-sandbox-gpu   (3.0 GB of wheels, a 6.45 GB image)
# DOCKER_HOST picks the daemon (scripts/dockerd.sh starts a private one).
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=cpu tag=kernelopt-sandbox base="" torch=""
while [ $# -gt 0 ]; do
  case "$1" in
    --flavour) flavour=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --torch) torch=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
cache=${KERNELOPT_DOCKER_CACHE:-$HOME/.cache/kernelopt/docker}
if [ -z "$base" ]; then
  base=$(bash scripts/docker_base.sh | tail -n 1)
fi
if [ -z "$torch" ]; then
  if [ "$flavour" = cpu ] && [ -x .venv/bin/python ]; then
    torch=$(.venv/bin/python -c "import torch; print(torch.__version__.split('+')[0])")
  else
    torch=$(sed -n 's/^ARG TORCH_VERSION=//p' Dockerfile)
  fi
fi
# The wheels must fit the base's Python and C library, whatever the host's are. pip takes a
# --platform literally (manylinux_2_28 does not admit a manylinux_2_27 wheel, as cuDNN's is), so
# every glibc the base's satisfies is named, down to manylinux2014 (which admits 2010 and 1).
read -r pyver glibc < <(docker run --rm --network none "$base" python3 -c \
  'import platform, sys; print(f"{sys.version_info[0]}{sys.version_info[1]}", platform.libc_ver()[1])')
wheels="$cache/wheelhouse-$flavour-py$pyver"
mkdir -p "$wheels"
platforms=()
for minor in $(seq "${glibc#2.}" -1 17); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
target=(--only-binary=:all: --python-version "$pyver" --implementation cp "${platforms[@]}"
        --platform manylinux2014_x86_64 --platform any -d "$wheels")
if [ "$flavour" = cpu ]; then
  packages=("torch==$torch+cpu" ninja numpy)
  index=https://download.pytorch.org/whl/cpu
else
  cuda=$(sed -n 's/^ARG CUDA_VERSION=//p' Dockerfile)
  packages=("torch==$torch" ninja numpy "$(sed -n 's/^ARG CUPY=//p' Dockerfile)")
  for package in $(sed -n 's/^ARG CUDA_PACKAGES="\(.*\)"/\1/p' Dockerfile); do packages+=("$package==$cuda.*"); done
  index=""
fi
echo "wheelhouse $wheels: ${packages[*]}"
# pip's own configuration first (a mirror, a local index); torch's CPU index where that lacks it.
if ! python3 -m pip download -q "${target[@]}" "${packages[@]}" 2>"$cache/pip-download.log"; then
  [ -n "$index" ] || { cat "$cache/pip-download.log" >&2; exit 1; }
  python3 -m pip download -q "${target[@]}" --extra-index-url "$index" "${packages[@]}"
fi
# The build context's wheelhouse/ holds them for the build only (links, not copies, where it can).
cleanup() { find wheelhouse -maxdepth 1 -name '*.whl' -delete; }
trap cleanup EXIT
cleanup
cp -l "$wheels"/*.whl wheelhouse/ 2>/dev/null || cp "$wheels"/*.whl wheelhouse/
started=$(date +%s)
if ! docker build --network none --build-arg BASE="$base" --build-arg FLAVOUR="$flavour" \
  --build-arg TORCH_VERSION="$torch" -t "$tag" . >"$cache/build-$flavour.log" 2>&1; then
  tail -n 40 "$cache/build-$flavour.log" >&2
  echo "docker build failed: its log is $cache/build-$flavour.log" >&2
  exit 1
fi
size=$(docker image inspect -f '{{.Size}}' "$tag")
echo "sandbox image $tag ($flavour, torch $torch): built in $(( $(date +%s) - started )) s, $(( size / 1000000 )) MB"

#!/usr/bin/env bash
# The sandbox image's base, built from Debian's packages where no base image can be pulled (CI,
# air-gapped clusters, a private daemon without a bridge, whose build steps cannot fetch):
#   bash scripts/docker_base.sh      prints the image's name as its last line
# debootstrap makes a minimal Debian bookworm with what the Dockerfile's first stage would
# otherwise install (python3, python3-venv, python3-dev: the headers extensions build against,
# g++, libjemalloc2), so that stage fetches nothing. The root filesystem is kept as a tarball in
# $KERNELOPT_DOCKER_CACHE (default ~/.cache/kernelopt/docker), so it is made once per machine;
# `docker import` makes the image from it (skipped when the daemon already has it). Both are
# named by a digest of the package list: a changed list makes a new base. Needs root and
# debootstrap. KERNELOPT_DEBIAN_MIRROR picks another Debian mirror.
set -euo pipefail
cache=${KERNELOPT_DOCKER_CACHE:-$HOME/.cache/kernelopt/docker}
suite=bookworm
packages=python3,python3-venv,python3-dev,g++,libjemalloc2,ca-certificates
digest=$(printf '%s %s' "$suite" "$packages" | sha256sum | cut -c1-10)
name="kernelopt-base:$suite-$digest"
tarball="$cache/base-$suite-$digest.tar"

if docker image inspect "$name" >/dev/null 2>&1; then
  echo "base image $name: present" >&2
  echo "$name"
  exit 0
fi
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { echo "debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
  root=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  echo "building the base root filesystem with debootstrap ($suite: $packages)" >&2
  debootstrap --variant=minbase --include="$packages" "$suite" "$root" ${KERNELOPT_DEBIAN_MIRROR:-} \
    >"$cache/debootstrap.log" 2>&1 || { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
  # What an image does not need: package caches, documentation, manuals, translations.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/log/*
  tar -C "$root" -cf "$tarball.partial" .
  mv "$tarball.partial" "$tarball"
fi
docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' "$tarball" "$name" >/dev/null
echo "base image $name: imported from $tarball ($(du -h "$tarball" | cut -f1))" >&2
echo "$name"

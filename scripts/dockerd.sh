#!/usr/bin/env bash
# A private Docker daemon for the `docker` tests (CI, or a machine whose user has no daemon):
#   bash scripts/dockerd.sh start DIR   starts dockerd with its socket at DIR/docker.sock, its pid
#                                       in DIR/dockerd.pid, its log in DIR/dockerd.log; waits
#                                       until it answers; prints the DOCKER_HOST to use
#   bash scripts/dockerd.sh stop DIR    stops that daemon by its PID (and waits for it to exit)
# No iptables rules and no bridge: the host's network is left as it is, and containers (and
# build steps) get no network at all. The images live in a data root that survives between runs,
# $KERNELOPT_DOCKER_CACHE/data (default ~/.cache/kernelopt/docker/data), so a second run finds
# the base and the sandbox image built; a second daemon on the same data root is refused.
# Needs root (dockerd) and docker.io (scripts/docker_tests.sh installs it).
set -euo pipefail
action=${1:?usage: dockerd.sh start|stop DIR}
dir=${2:?usage: dockerd.sh start|stop DIR}
cache=${KERNELOPT_DOCKER_CACHE:-$HOME/.cache/kernelopt/docker}

case "$action" in
start)
  mkdir -p "$dir" "$cache/data"
  # One daemon per data root: a second would corrupt it.
  if pgrep -f -- "--data-root $cache/data" >/dev/null; then
    echo "another dockerd uses $cache/data (set KERNELOPT_DOCKER_CACHE to another directory)" >&2
    exit 1
  fi
  dockerd --iptables=false --ip-masq=false --bridge=none \
    --host "unix://$dir/docker.sock" --data-root "$cache/data" --exec-root "$dir/exec" \
    --pidfile "$dir/dockerd.pid" >"$dir/dockerd.log" 2>&1 </dev/null &
  echo $! >"$dir/dockerd.pid.launch"
  for _ in $(seq 1 120); do
    if DOCKER_HOST="unix://$dir/docker.sock" docker version >/dev/null 2>&1; then
      echo "unix://$dir/docker.sock"
      exit 0
    fi
    if ! kill -0 "$(cat "$dir/dockerd.pid.launch")" 2>/dev/null; then
      break
    fi
    sleep 0.5
  done
  echo "dockerd did not start; its log ($dir/dockerd.log) ends:" >&2
  tail -n 20 "$dir/dockerd.log" >&2
  exit 1
  ;;
stop)
  pid=$(cat "$dir/dockerd.pid" 2>/dev/null || cat "$dir/dockerd.pid.launch" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd ($pid) did not stop in 30 s: killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # Container shims of this daemon outlive it by design (live restore); a private daemon's go too.
  for shim in $(pgrep -f -- "-address $dir/exec/containerd/" || true); do
    echo "stopping a container shim left by the daemon (pid $shim)" >&2
    kill -KILL "$shim" 2>/dev/null || true
  done
  ;;
*)
  echo "usage: dockerd.sh start|stop DIR" >&2
  exit 2
  ;;
esac

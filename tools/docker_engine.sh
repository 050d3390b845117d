#!/usr/bin/env bash
# Make sure everything the container path needs is here: a Docker engine that answers and, for the
# stand-in Flower images (tools/docker_images.sh), debootstrap. As root, the Debian packages docker.io
# and debootstrap are installed when missing (even where an engine already answers), and dockerd is
# started in the background when none answers (log: .deploy/dockerd.log). Exit 2, with what to do,
# where that is not possible. Idempotent: a second call does nothing.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf '\033[1;34m[docker-engine]\033[0m %s\n' "$*" >&2; }
answers() { docker info >/dev/null 2>&1; }

packages=()
command -v debootstrap >/dev/null || packages+=(debootstrap)
if ! answers; then
  # a docker client alone (e.g. a static /usr/local/bin/docker) is not an engine
  command -v dockerd >/dev/null || packages+=(docker.io)
fi
if [ ${#packages[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    say "missing: ${packages[*]}; install them (apt-get install -y ${packages[*]}) or run as root"
    # debootstrap is needed only for stand-in images that are not built yet (tools/docker_images.sh says so)
    answers && exit 0
    exit 2
  fi
  say "installing ${packages[*]} (apt-get)"
  start=$SECONDS
  # the package lists are refreshed only when apt cannot find a candidate in what it already has
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${packages[@]}" >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${packages[@]}" >/dev/null
  fi
  say "installed in $((SECONDS - start)) s"
fi

answers && exit 0
if [ "$(id -u)" != 0 ]; then
  say "no Docker engine answers; start one (or run as root to have dockerd started)"
  exit 2
fi
mkdir -p "$ROOT/.deploy"
# a dockerd that died (e.g. with the machine) leaves its pid file behind, and a new one refuses to start
pidfile=/var/run/docker.pid
if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then rm -f "$pidfile"; fi
start=$SECONDS
# containerd comes with docker.io; dockerd starts its own when none runs
nohup dockerd >"$ROOT/.deploy/dockerd.log" 2>&1 &
for _ in $(seq 1 120); do
  answers && { say "dockerd started in $((SECONDS - start)) s (log: .deploy/dockerd.log)"; exit 0; }
  sleep 0.5
done
say "dockerd did not answer within 60 s; see .deploy/dockerd.log"
exit 2

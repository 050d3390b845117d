#!/usr/bin/env bash
# Make sure a Docker engine answers: as root, install docker.io and debootstrap (Debian packages) if
# missing and start dockerd in the background (log: .deploy/dockerd.log). Exit 2, with what to do,
# where that is not possible.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
docker info >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "docker-engine: no Docker engine answers; start one (or run as root to have docker.io installed and started)" >&2
  exit 2
fi
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  echo "docker-engine: installing docker.io and debootstrap" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi
mkdir -p "$ROOT/.deploy"
nohup dockerd >"$ROOT/.deploy/dockerd.log" 2>&1 &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { echo "docker-engine: dockerd started (log: .deploy/dockerd.log)" >&2; exit 0; }
  sleep 1
done
echo "docker-engine: dockerd did not answer within 60 s; see .deploy/dockerd.log" >&2
exit 2

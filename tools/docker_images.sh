#!/usr/bin/env bash
# Build the images docker-compose.yml needs on a host that cannot pull from Docker Hub.
#
#   tools/docker_images.sh            # stand-ins for flwr/* (only if absent), then fedforget:latest
#
# 1. flwr/superlink, flwr/supernode, flwr/superexec at $FLWR_VERSION: used as they are when present or
#    pullable; otherwise built from deploy/flwr-standin/Dockerfile (Flower's layout: uid 49999, /app,
#    /python/venv, same entrypoints) on a Debian root filesystem made with debootstrap and `docker
#    import`ed, and tagged with the official names so docker-compose.yml runs unchanged.
# 2. fedforget:latest (the SuperNodes' ClientApp image, target node) and fedforget-server:latest (the ServerApp
#    executor and the coordinator, target server: no training data) from deploy/Dockerfile; pip inside the
#    build reads a wheelhouse prepared here (`pip download`, through this host's pip configuration) with
#    PIP_NO_INDEX=1. The second build reuses the first one's layers.
# The debootstrap and the wheelhouse download run at the same time (both mostly wait on the network).
# Idempotent: a stand-in image that exists is not rebuilt; the project image is rebuilt whenever what it
# is built from changed (its label fedforget.source holds their hash: a stale image would test old code),
# or with FEDFORGET_REBUILD=1; nothing is downloaded when every image is there and current. Each step
# prints how long it took.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLWR_VERSION=${FLWR_VERSION:-1.42.0}
ROOTFS_IMAGE=${ROOTFS_IMAGE:-fedforget/debian-rootfs:bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
WHEELS=$ROOT/deploy/wheelhouse
STAMP=$ROOT/.deploy/wheelhouse.key
export DOCKER_BUILDKIT=0   # the classic builder: no buildx plugin and no frontend image to pull
say() { printf '\033[1;34m[docker-images]\033[0m %s\n' "$*"; }
die() { echo "docker-images: $*" >&2; exit "${2:-1}"; }
have() { docker image inspect "$1" >/dev/null 2>&1; }
took() { say "$1 in $(($(date +%s) - $2)) s"; }
build() {  # docker build -q, its errors shown without the classic builder's deprecation notice
  local rc=0 err; err=$(mktemp)
  docker build -q --force-rm "$@" >/dev/null 2>"$err" || rc=$?
  grep -vE 'DEPRECATED: The legacy builder|BuildKit is currently disabled|environment-variable\.|^\s*$' "$err" >&2 || true
  rm -f "$err"
  return "$rc"
}

rootfs() {
  have "$ROOTFS_IMAGE" && return
  command -v debootstrap >/dev/null || die "install debootstrap (apt-get install -y debootstrap; tools/docker_engine.sh does)" 2
  local dir t0; dir=$(mktemp -d /tmp/fedforget-rootfs.XXXXXX); t0=$(date +%s)
  say "debootstrap Debian bookworm (python3 3.11, venv) into $dir"
  debootstrap --variant=minbase --include=ca-certificates,python3,python3-venv,libsqlite3-0 \
    bookworm "$dir" "$DEBIAN_MIRROR" >"$dir.log" 2>&1 || die "debootstrap failed; see $dir.log"
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | docker import - "$ROOTFS_IMAGE" >/dev/null
  rm -rf "$dir" "$dir.log"
  took "root filesystem $ROOTFS_IMAGE" "$t0"
}

wheelhouse() {
  local t0 key assets; t0=$(date +%s)
  "$PYTHON" "$ROOT/tools/installed_closure.py" flwr > "$WHEELS/flwr/requirements.txt"
  grep -qx "flwr==$FLWR_VERSION" "$WHEELS/flwr/requirements.txt" \
    || die "this venv has no flwr==$FLWR_VERSION; run make setup" 2
  assets=$(sed -n 's/^ASSET_WHEELS="\(.*\)"/\1/p' "$ROOT/tools/setup.sh" | tr ' ' '\n' | grep -v '^flwr==')
  # torch's own dependencies are not in the lock (setup installs torch first): take them from the venv
  "$PYTHON" "$ROOT/tools/installed_closure.py" torch > "$WHEELS/app/torch-requirements.txt"
  # a wheelhouse that holds everything these lists name is not downloaded again
  key=$(cat "$WHEELS/flwr/requirements.txt" "$WHEELS/app/torch-requirements.txt" "$ROOT/requirements.lock" \
        <(echo "$assets") | sha256sum | cut -c1-16)
  # (the stamp is kept outside the build context, so writing it does not invalidate the build cache)
  if [ "$(cat "$STAMP" 2>/dev/null)" = "$key" ]; then say "wheelhouse up to date"; return; fi
  say "wheelhouse: flwr==$FLWR_VERSION and the pinned set (pip download through this host's configuration)"
  "$PYTHON" -m pip download -q --no-deps --dest "$WHEELS/flwr" -r "$WHEELS/flwr/requirements.txt" 2>&1 \
    | { grep -v 'is ignored' || true; }
  # shellcheck disable=SC2086
  "$PYTHON" -m pip download -q --no-deps --dest "$WHEELS/app" -r "$ROOT/requirements.lock" \
    -r "$WHEELS/app/torch-requirements.txt" $assets 2>&1 | { grep -v 'is ignored' || true; }
  mkdir -p "$(dirname "$STAMP")" && echo "$key" > "$STAMP"
  took "wheelhouse ($(du -sh "$WHEELS" | cut -f1))" "$t0"
}

standins_missing() {
  local c
  for c in superlink supernode superexec; do have "flwr/$c:$FLWR_VERSION" || return 0; done
  return 1
}

pulled() {
  timeout 60 docker pull -q "flwr/superlink:$FLWR_VERSION" >/dev/null 2>&1 \
    && docker pull -q "flwr/supernode:$FLWR_VERSION" >/dev/null && docker pull -q "flwr/superexec:$FLWR_VERSION" >/dev/null \
    || return 1
  docker tag "flwr/superexec:$FLWR_VERSION" "flwr/superexec:$FLWR_VERSION-py3.11-ubuntu24.04"
  say "pulled Flower's images $FLWR_VERSION"
}

standins() {
  local c t0; t0=$(date +%s)
  say "building stand-ins for flwr/superlink, flwr/supernode, flwr/superexec $FLWR_VERSION"
  # the build context is the flwr wheelhouse alone: small, and the shared base stage is built once
  for c in superlink supernode superexec; do
    build -f "$ROOT/deploy/flwr-standin/Dockerfile" --target "$c" --build-arg "ROOTFS_IMAGE=$ROOTFS_IMAGE" \
      --build-arg "FLWR_VERSION=$FLWR_VERSION" -t "flwr/$c:$FLWR_VERSION" "$WHEELS/flwr"
  done
  docker tag "flwr/superexec:$FLWR_VERSION" "flwr/superexec:$FLWR_VERSION-py3.11-ubuntu24.04"
  took "stand-in images" "$t0"
}

# what fedforget:latest is built from (deploy/Dockerfile's COPY sources and build args), hashed
source_key() {
  { echo "FLWR_VERSION=$FLWR_VERSION"
    cd "$ROOT" && find deploy/Dockerfile deploy/flwr-config.docker.toml deploy/register-supernodes.sh pyproject.toml \
      requirements.lock README.md tools/tv_cpu_compat.py fedforget -type f -not -path '*/__pycache__/*' \
      -not -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}

PROJECT_IMAGES="fedforget:latest fedforget-server:latest"

project_current() {
  local image key; key=$(source_key)
  for image in $PROJECT_IMAGES; do
    [ "$(docker image inspect -f '{{index .Config.Labels "fedforget.source"}}' "$image" 2>/dev/null)" = "$key" ] \
      || return 1
  done
}

project() {
  local t0 key target; t0=$(date +%s); key=$(source_key)
  say "building fedforget:latest (node) and fedforget-server:latest (server) from deploy/Dockerfile (offline wheelhouse)"
  for target in node server; do
    build -f "$ROOT/deploy/Dockerfile" --target "$target" --build-arg PIP_NO_INDEX=1 --build-arg WITH_FMNIST=0 \
      --build-arg "FLWR_VERSION=$FLWR_VERSION" --label "fedforget.source=$key" \
      -t "$([ "$target" = node ] && echo fedforget:latest || echo fedforget-server:latest)" "$ROOT"
  done
  took "fedforget:latest ($(docker image inspect -f '{{.Size}}' fedforget:latest | awk '{printf "%.2f GB", $1/1e9}'))" "$t0"
}

docker info >/dev/null 2>&1 || die "no Docker engine answers; start dockerd first (tools/docker_engine.sh)" 2
need_standins=0; need_project=0
if standins_missing; then pulled || need_standins=1; else say "flwr images $FLWR_VERSION present"; fi
if ! have fedforget:latest || ! have fedforget-server:latest; then need_project=1
elif ! project_current || [ "${FEDFORGET_REBUILD:-0}" = 1 ]; then need_project=1; say "fedforget:latest is older than the source"
else say "fedforget:latest and fedforget-server:latest present and current"; fi
if [ "$need_standins$need_project" != 00 ]; then
  if [ "$need_standins" = 1 ]; then
    rootfs & pid=$!
    wheelhouse
    wait "$pid" || die "the root filesystem could not be built"
    standins
  else
    wheelhouse
  fi
  if [ "$need_project" = 1 ]; then project; fi
fi
say "images ready: $(docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^(flwr|fedforget)' | tr '\n' ' ')"

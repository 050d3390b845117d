#!/usr/bin/env bash
# `make test`: every tier, in the order that keeps a 2-core machine both busy and responsive.
#
#   1. ruff
#   2. unit + integration, TEST_WORKERS in parallel (CPU-bound, no deadlines); the container images build
#      beside them (tools/docker_images.sh, logged to .deploy/images.log)
#   3. the end-to-end tests (Ray, loopback SuperLink + SuperNodes, the installed wheel, the compose topology
#      on the Docker engine), E2E_WORKERS at a time: their SuperNodes heartbeat on deadlines, and a crowded
#      machine turns a late heartbeat into a node declared gone and work redone. The longest start first
#      (tests/conftest.py orders them by their measured durations) and each worker takes the next test when
#      it is free (--dist load --maxschedchunk 1), so no worker idles while the other runs the last long
#      test; the two compose tests are first in line, on one worker, one after the other
#
# Every tier runs even when an earlier one fails; the exit status is non-zero when any failed.
# CONTAINERS=0 leaves out the engine and the images (the compose tests then skip and say so).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TEST_WORKERS=${TEST_WORKERS:-3}
E2E_WORKERS=${E2E_WORKERS:-2}
CONTAINERS=${CONTAINERS:-1}
read -r -a EXTRA <<< "${PYTEST_ARGS:-}"
# shellcheck disable=SC1091
source .venv/bin/activate
failed=()
timings=()
RUN_T0=$(date +%s)
LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
tier() { printf '\n\033[1m== make test: %s\033[0m\n' "$1"; TIER_T0=$(date +%s); }
done_tier() {
  local took=$(($(date +%s) - TIER_T0))
  echo "== $1: $2 in $took s"
  timings+=("{\"tier\": \"$1\", \"status\": \"$2\", \"seconds\": $took}")
  [[ $2 == passed ]] || failed+=("$1")
}
# what each tier took, with the commit and the machine: .deploy/test-tiers.json (TEST_TIMES_JSON)
write_timings() {
  local out=${TEST_TIMES_JSON:-.deploy/test-tiers.json} IFS=,
  mkdir -p "$(dirname "$out")"
  printf '{"commit": "%s", "date": "%s", "cores": %s, "memory-gib": %s, "load-at-start": "%s", "load-at-end": "%s",\n "config": {"TEST_WORKERS": %s, "E2E_WORKERS": %s, "CONTAINERS": %s, "PYTEST_ARGS": "%s"},\n "seconds-total": %s, "tiers": [%s]}\n' \
    "$(git rev-parse HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo +dirty)" "$(date -u +%FT%TZ)" "$(nproc)" \
    "$(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)" "$LOAD_AT_START" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$TEST_WORKERS" "$E2E_WORKERS" "$CONTAINERS" "${PYTEST_ARGS:-}" "$(($(date +%s) - RUN_T0))" "${timings[*]}" > "$out"
  echo "make test: tier times in $out"
}

tier "ruff"
if ruff check .; then done_tier ruff passed; else done_tier ruff failed; fi

images=""
if [[ $CONTAINERS == 1 ]]; then
  bash tools/docker_engine.sh || { echo "make test: no Docker engine (CONTAINERS=0 leaves the containers out)" >&2; exit 1; }
  mkdir -p .deploy
  bash tools/docker_images.sh > .deploy/images.log 2>&1 &
  images=$!
  echo "== container images building in the background (log: .deploy/images.log)"
fi

tier "unit + integration (-n $TEST_WORKERS)"
if FEDFORGET_DOCKER_E2E=0 python -m pytest -q -n "$TEST_WORKERS" --dist loadscope -m "not e2e" "${EXTRA[@]}"; then
  done_tier "unit + integration" passed
else
  done_tier "unit + integration" failed
fi

if [[ -n $images ]]; then
  tier "container images"
  if wait "$images"; then sed 's/\x1b\[[0-9;]*m//g' .deploy/images.log; done_tier "container images" passed
  else tail -40 .deploy/images.log; done_tier "container images" failed; fi
fi

tier "end-to-end on Flower's runtimes and the containers (-n $E2E_WORKERS)"
# with CONTAINERS=0 the compose tests skip and say why
if FEDFORGET_DOCKER_E2E=$CONTAINERS python -m pytest -q -rs -n "$E2E_WORKERS" --dist load --maxschedchunk 1 -m e2e \
    "${EXTRA[@]}"; then
  done_tier "end-to-end" passed
else
  done_tier "end-to-end" failed
fi

write_timings
if ((${#failed[@]})); then echo "make test: failed: ${failed[*]}" >&2; exit 1; fi
echo "make test: every tier passed"

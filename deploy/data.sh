#!/usr/bin/env bash
# Each SuperNode's own data, written on the host before a deployment starts: `fedforget data split` cuts a
# shipped task into DIR/node-<p>/ (one node's training records, record ids and raw inputs) and DIR/server/
# (the test split only, the ServerApp's run-config `test-data`). A deployment then hands node-<p>/ to SuperNode
# p alone (loopback: --node-config data-dir=DIR/node-<p>; compose: a read-only bind mount at /data) and server/
# to the ServerApp; nothing else holds training rows. Real operators put their own records there instead
# (docs/operations/data.md).
#   deploy/data.sh DIR NODES          # writes DIR once; an existing DIR with every node-<p>/ is kept
# FEDFORGET_DATA_TASK (digits-mlp), FEDFORGET_DATA_ARGS (e.g. "--train-size 600 --seed 1") choose the cut.
set -euo pipefail
DIR=${1:?usage: deploy/data.sh DIR NODES}
NODES=${2:?usage: deploy/data.sh DIR NODES}
TASK=${FEDFORGET_DATA_TASK:-digits-mlp}
complete() {
  [ -d "$DIR/server" ] || return 1
  local p
  for p in $(seq 0 $((NODES - 1))); do [ -d "$DIR/node-$p" ] || return 1; done
  [ ! -d "$DIR/node-$NODES" ]
}
if complete; then echo "deploy-data: $DIR holds $NODES nodes' data and the server's test split (kept)"; exit 0; fi
rm -rf "$DIR"
# shellcheck disable=SC2086
fedforget data split --task "$TASK" --nodes "$NODES" --out "$DIR" ${FEDFORGET_DATA_ARGS:-} >/dev/null
# the containers run as uid 49999 (Flower's image user): the bind-mounted data must be readable by it
chmod -R a+rX "$DIR"
echo "deploy-data: wrote $DIR/node-0..node-$((NODES - 1)) ($TASK, one directory per SuperNode) and $DIR/server (test split)"

#!/usr/bin/env bash
# A real Flower deployment on 127.0.0.1: one flower-superlink and N flower-supernode processes,
# each SuperNode with its own partition (--node-config) and state dir. Logs, pids and state live in
# $FEDFORGET_DEPLOY_DIR (default .deploy/, git-ignored).
#   deploy/loopback.sh up | down | status | kill-node I | restart-node I
# kill-node: kill -9 SuperNode I and its ClientApp processes (a crash); restart-node: start it again with
# the same partition and state dir (it gets a new node id) and wait until the SuperLink activates it.
# FEDFORGET_DEPLOY_TLS=1: TLS on the SuperLink (a private CA from deploy/certs.sh in $DIR/certs);
# FEDFORGET_DEPLOY_AUTH=1: SuperNode authentication (keys from deploy/keys.sh in $DIR/keys, each
# registered with the SuperLink before its SuperNode starts); flwr requires TLS for it, so AUTH
# implies TLS. `make deploy-up TLS=1 AUTH=1` sets both.
# FEDFORGET_DEPLOY_DATA=DIR: each SuperNode p trains on its own records, DIR/node-<p> (deploy/data.sh writes
# them; --node-config data-dir=DIR/node-<p> node-name=node-<p>); the ServerApp then evaluates on DIR/server
# (run-config test-data). Unset: each SuperNode draws its partition of the shipped task's public set.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${FEDFORGET_DEPLOY_DIR:-$ROOT/.deploy}
PORT=${FEDFORGET_DEPLOY_PORT:-39200}
NODES=${FEDFORGET_DEPLOY_NODES:-3}
NODE_PORT_BASE=${FEDFORGET_DEPLOY_NODE_PORT_BASE:-$((PORT + 10))}
AUTH=${FEDFORGET_DEPLOY_AUTH:-0}
DATA=${FEDFORGET_DEPLOY_DATA:-}
TLS=${FEDFORGET_DEPLOY_TLS:-$AUTH}
[ "$AUTH" = 1 ] && TLS=1
PYTHON=${PYTHON:-python3}
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
  mkdir -p "$DIR"
  if alive "$DIR/superlink.pid"; then echo "deploy: already up (pid $(cat "$DIR/superlink.pid")); run 'make deploy-down' first" >&2; exit 2; fi
  rm -rf "$DIR"/state.db "$DIR"/node* "$DIR"/home-* "$DIR"/supernode*.log
  local link_tls=(--insecure) scheme=http
  if [ "$TLS" = 1 ]; then
    bash "$ROOT/deploy/certs.sh" "$DIR/certs" "$NODES" >/dev/null
    link_tls=(--ssl-ca-certfile "$DIR/certs/ca.crt" --ssl-certfile "$DIR/certs/server.pem"
              --ssl-keyfile "$DIR/certs/server.key")
    scheme=https
  fi
  [ "$AUTH" = 1 ] && link_tls+=(--enable-supernode-auth)
  write_cli_config
  # in-memory link state (no --database): under load the SQLite state answers "database is locked"
  # to a SuperNode's reply upload, and that SuperNode then drops the reply
  FLWR_HOME="$DIR/home-superlink" setsid flower-superlink "${link_tls[@]}" --host 127.0.0.1 --port "$PORT" \
    --disable-runtime-dependency-installation \
    >"$DIR/superlink.log" 2>&1 < /dev/null &
  echo $! > "$DIR/superlink.pid"
  for _ in $(seq 1 300); do
    "$PYTHON" -c "import ssl, urllib.request; urllib.request.urlopen('$scheme://127.0.0.1:$PORT/health', timeout=1,
      context=ssl.create_default_context(cafile='$DIR/certs/ca.crt') if '$scheme' == 'https' else None)" \
      >/dev/null 2>&1 && break
    alive "$DIR/superlink.pid" || { echo "deploy: superlink exited; see $DIR/superlink.log" >&2; exit 1; }
    sleep 0.2
  done
  [ "$AUTH" = 1 ] && { register_keys || exit 1; }
  for i in $(seq 0 $((NODES - 1))); do start_supernode "$i"; done
  wait_activated "$NODES" || { echo "deploy: only $(activated) of $NODES supernodes registered; see $DIR/*.log" >&2; exit 1; }
  [ -n "$DATA" ] && echo "deploy: each supernode trains on its own records ($DATA/node-<p>); run with test-data=\"$(cd "$DATA" && pwd)/server\""
  echo "deploy: superlink on 127.0.0.1:$PORT ($([ "$TLS" = 1 ] && echo TLS || echo insecure)$([ "$AUTH" = 1 ] \
    && echo ', node auth')), $NODES supernodes online (logs and state in $DIR; flwr connection: $DIR/home-cli)"
}

# Start SuperNode $1 (partition $1, state dir $DIR/node$1, Runtime API port NODE_PORT_BASE+$1) in its own
# session; a restart reuses the partition, state dir and key, and the SuperLink gives it a new node id.
start_supernode() {
  local i=$1 port=${2:-$((NODE_PORT_BASE + $1))} node_tls=(--insecure) auth=() own=""
  [ "$TLS" = 1 ] && node_tls=(--root-certificates "$DIR/certs/ca.crt")
  [ "$AUTH" = 1 ] && auth=(--auth-supernode-private-key "$DIR/keys/supernode-$i")
  mkdir -p -m 700 "$DIR/node$i"
  if [ -n "$DATA" ]; then
    [ -d "$DATA/node-$i" ] || { echo "deploy: $DATA/node-$i is not a directory; run deploy/data.sh $DATA $NODES" >&2; exit 2; }
    own=" data-dir=\"$(cd "$DATA/node-$i" && pwd)\" node-name=\"node-$i\""
  fi
  FLWR_HOME="$DIR/home-node$i" setsid flower-supernode "${node_tls[@]}" "${auth[@]}" --superlink "127.0.0.1:$PORT" \
    --host 127.0.0.1 --port "$port" \
    --node-config "partition-id=$i num-partitions=$NODES state-dir=\"$DIR/node$i\"$own" \
    >>"$DIR/supernode$i.log" 2>&1 < /dev/null &
  echo $! > "$DIR/supernode$i.pid"
}

# How many SuperNode activations the SuperLink has logged (a restarted SuperNode counts again).
activated() { grep -c "Fleet.ActivateNode\] Activated" "$DIR/superlink.log" 2>/dev/null || true; }

# Wait (up to 120 s) until the SuperLink has logged at least $1 activations; with a pid file $2, stop waiting
# as soon as that process has exited.
wait_activated() {
  local n
  for _ in $(seq 1 600); do
    n=$(activated)
    [ "${n:-0}" -ge "$1" ] && return 0
    [ -n "${2:-}" ] && ! alive "$2" && return 1
    sleep 0.2
  done
  return 1
}

# kill -9 SuperNode $1 with everything in its session (its SuperExec and ClientApp processes): a crash,
# not a shutdown, so the SuperLink only notices when the node's heartbeats stop.
kill_node() {
  local f="$DIR/supernode$1.pid"
  [ -f "$f" ] || { echo "deploy: no supernode $1" >&2; exit 2; }
  kill -KILL -- "-$(cat "$f")" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$(cat "$f")" 2>/dev/null || break; sleep 0.1; done
  echo "deploy: supernode $1 killed"
}

# Start SuperNode $1 again (after kill-node) and wait until the SuperLink has activated it. The port its dead
# predecessor served on may have been taken since (an outgoing connection's ephemeral port, a socket not yet
# released): a SuperNode that exits at start is started again on a port the kernel hands out free.
restart_node() {
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -lt "$NODES" ] || { echo "deploy: no supernode $1" >&2; exit 2; }
  if alive "$DIR/supernode$1.pid"; then echo "deploy: supernode $1 is running" >&2; exit 2; fi
  local before port="" attempt
  before=$(activated)
  for attempt in 1 2 3; do
    start_supernode "$1" "$port"
    if wait_activated $((${before:-0} + 1)) "$DIR/supernode$1.pid"; then
      echo "deploy: supernode $1 back (pid $(cat "$DIR/supernode$1.pid"))"
      return 0
    fi
    alive "$DIR/supernode$1.pid" && break  # running but not activated: not a port to change
    echo "deploy: supernode $1 exited at start (attempt $attempt): $(grep -o 'Errno.*' "$DIR/supernode$1.log" | tail -1)" >&2
    port=$("$PYTHON" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  done
  echo "deploy: supernode $1 did not come back; see $DIR/supernode$1.log" >&2
  exit 1
}

# A Flower CLI home whose default connection is this deployment (TLS: trusts the private CA).
write_cli_config() {
  mkdir -p "$DIR/home-cli"
  {
    printf '[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:%s"\n' "$PORT"
    if [ "$TLS" = 1 ]; then printf 'root-certificates = "%s"\n' "$DIR/certs/ca.crt"; else printf 'insecure = true\n'; fi
  } > "$DIR/home-cli/config.toml"
}

# Register every SuperNode's public key with the SuperLink; its node id is fixed from now on.
register_keys() {
  bash "$ROOT/deploy/keys.sh" "$DIR/keys" "$NODES" >/dev/null
  for i in $(seq 0 $((NODES - 1))); do
    FLWR_HOME="$DIR/home-cli" flwr supernode register "$DIR/keys/supernode-$i.pub" loopback \
      --name "supernode-$i" >>"$DIR/register.log" 2>&1 \
      || { echo "deploy: could not register supernode-$i; see $DIR/register.log" >&2; return 1; }
  done
}

down() {
  for f in "$DIR"/supernode*.pid "$DIR"/superlink.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    # each process leads its own session (setsid): stop it with its SuperExec and app children
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$f"
  done
  echo "deploy: stopped"
}

status() {
  for f in "$DIR"/superlink.pid "$DIR"/supernode*.pid; do
    [ -f "$f" ] || continue
    if alive "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"; else echo "$(basename "$f" .pid): dead"; fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  kill-node) kill_node "${2:?node index}" ;;
  restart-node) restart_node "${2:?node index}" ;;
  *) echo "usage: deploy/loopback.sh up|down|status|kill-node I|restart-node I" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Register every SuperNode public key in KEYS_DIR with the SuperLink (SuperNode authentication).
# Idempotent: a key that is already registered is fine. Used by the `register-supernodes` service of
# deploy/docker-compose.auth.yml before any SuperNode starts.
#   register-supernodes.sh [KEYS_DIR] [CONNECTION]
set -euo pipefail
KEYS=${1:-/keys}
CONN=${2:-docker-tls}
shopt -s nullglob
pubs=("$KEYS"/*.pub)
[ ${#pubs[@]} -gt 0 ] || { echo "register-supernodes: no *.pub keys in $KEYS; run deploy/keys.sh" >&2; exit 2; }
for _ in $(seq 1 120); do
  flwr supernode list "$CONN" >/dev/null 2>&1 && break
  sleep 1
done
for pub in "${pubs[@]}"; do
  name=$(basename "$pub" .pub)
  if out=$(flwr supernode register "$pub" "$CONN" --name "$name" 2>&1); then
    echo "register-supernodes: $name registered"
  elif grep -q "already in use" <<<"$out"; then
    echo "register-supernodes: $name was already registered"
  else
    echo "register-supernodes: could not register $name: $out" >&2
    exit 1
  fi
done

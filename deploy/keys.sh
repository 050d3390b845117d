#!/usr/bin/env bash
# One authentication key pair per SuperNode (EC P-384, OpenSSH format, what flwr 1.42 expects),
# written to DIR (default deploy/keys, git-ignored). Idempotent: existing keys are kept.
#   deploy/keys.sh [DIR] [NODES]
# The public keys are registered with the SuperLink (`flwr supernode register KEY.pub CONNECTION`);
# a SuperNode whose key is not registered is refused.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-${FEDFORGET_KEYS_DIR:-$ROOT/deploy/keys}}
NODES=${2:-${FEDFORGET_DEPLOY_NODES:-3}}
mkdir -p "$DIR"
chmod 700 "$DIR"
umask 077
for i in $(seq 0 $((NODES - 1))); do
  key="$DIR/supernode-$i"
  [ -s "$key" ] && [ -s "$key.pub" ] && continue
  rm -f "$key" "$key.pub"
  if command -v ssh-keygen >/dev/null; then
    ssh-keygen -q -t ecdsa -b 384 -N "" -C "supernode-$i" -f "$key"
  else
    PYTHON=${PYTHON:-python3}
    "$PYTHON" - "$key" <<'PY'
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
key = ec.generate_private_key(ec.SECP384R1())
path = sys.argv[1]
open(path, "wb").write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                         serialization.NoEncryption()))
open(path + ".pub", "wb").write(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                             serialization.PublicFormat.OpenSSH) + b"\n")
PY
  fi
  chmod 600 "$key"
  chmod 644 "$key.pub"
done
echo "keys: $NODES SuperNode key pairs in $DIR (register the .pub files with the SuperLink)"

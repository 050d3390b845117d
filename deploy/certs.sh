#!/usr/bin/env bash
# A private CA and one server certificate for the SuperLink (and the SuperNodes' Runtime APIs),
# written to DIR (default deploy/certs, git-ignored). Idempotent: existing files are kept.
#   deploy/certs.sh [DIR] [NODES]
# SANs cover loopback (127.0.0.1, localhost) and the compose service names (superlink,
# supernode-0..NODES-1), so one certificate serves `make deploy-up TLS=1` and the TLS overlay.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-${FEDFORGET_CERTS_DIR:-$ROOT/deploy/certs}}
NODES=${2:-${FEDFORGET_DEPLOY_NODES:-3}}
DAYS=${FEDFORGET_CERT_DAYS:-365}
command -v openssl >/dev/null || { echo "certs.sh: openssl is required (apt-get install openssl)" >&2; exit 2; }
mkdir -p "$DIR"
chmod 700 "$DIR"
umask 077
if [ -s "$DIR/ca.crt" ] && [ -s "$DIR/server.pem" ] && [ -s "$DIR/server.key" ]; then
  echo "certs: kept the existing CA and server certificate in $DIR"; exit 0
fi
san="IP:127.0.0.1,DNS:localhost,DNS:superlink"
for i in $(seq 0 $((NODES - 1))); do san="$san,DNS:supernode-$i"; done
openssl req -x509 -newkey rsa:3072 -nodes -sha256 -days "$DAYS" -subj "/CN=fedforget-ca" \
  -keyout "$DIR/ca.key" -out "$DIR/ca.crt" 2>/dev/null
openssl req -newkey rsa:3072 -nodes -sha256 -subj "/CN=superlink" \
  -keyout "$DIR/server.key" -out "$DIR/server.csr" 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
  "$san" > "$DIR/server.ext"
openssl x509 -req -sha256 -days "$DAYS" -in "$DIR/server.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" \
  -CAcreateserial -extfile "$DIR/server.ext" -out "$DIR/server.pem" 2>/dev/null
rm -f "$DIR/server.csr" "$DIR/server.ext" "$DIR/ca.srl"
chmod 600 "$DIR"/*.key
chmod 644 "$DIR/ca.crt" "$DIR/server.pem"
echo "certs: CA $DIR/ca.crt, server certificate $DIR/server.pem (SAN $san)"

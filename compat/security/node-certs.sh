#!/usr/bin/env bash
# Generates throwaway certificates for a cluster's node-to-node port into DIR (never
# checked in): a CA (ca.pem) and, for each node 1..N, keel-node-ID.crt/.key naming the
# node keel-node-ID as its common name and as a DNS name, except node N, named by its
# common name only (both ways a node may be named). Also a second CA's certificate for
# node 1 (other-ca-node-1.crt/.key), which no node trusts.
#   compat/security/node-certs.sh DIR N
set -euo pipefail
dir=${1:?usage: node-certs.sh DIR N} n=${2:?usage: node-certs.sh DIR N}
mkdir -p "$dir"
cd "$dir"
days=30
ca() { # name
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days $days \
    -subj "/CN=Keel node CA $1" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
issue() { # ca name subject san
  openssl req -newkey rsa:2048 -nodes -keyout "$2.key.tmp" -out "$2.csr" -subj "$3" 2>/dev/null
  openssl pkcs8 -topk8 -nocrypt -in "$2.key.tmp" -out "$2.key"
  rm -f "$2.key.tmp" "$2.csr.ext"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s' "$4" > "$2.ext"
  openssl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1.key" -CAcreateserial -out "$2.crt" -days $days \
    -extfile "$2.ext" 2>/dev/null
}
ca ca
ca other-ca
for id in $(seq 1 "$n"); do
  if ((id == n)); then san=""; else san="subjectAltName=DNS:keel-node-$id\n"; fi
  issue ca "keel-node-$id" "/O=Keel/CN=keel-node-$id" "$(printf '%b' "$san")"
done
issue other-ca other-ca-node-1 "/O=Keel/CN=keel-node-1" "subjectAltName=DNS:keel-node-1"
echo "node certificates in $dir"

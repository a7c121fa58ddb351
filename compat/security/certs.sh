#!/usr/bin/env bash
# Generates throwaway test certificates into DIR (never checked in): a CA, a server
# certificate for 127.0.0.1/localhost, and a client certificate (subject
# CN=client,OU=test,O=Keel) for mutual TLS. Keys are unencrypted PKCS#8.
#   compat/security/certs.sh DIR
set -euo pipefail
dir=${1:?usage: certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
[ -s ca.pem ] && [ -s server.pem ] && [ -s client.pem ] && exit 0
days=30
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days $days \
  -subj "/CN=Keel Test CA" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
issue() { # name subject extensions
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key.tmp" -out "$1.csr" -subj "$2" 2>/dev/null
  openssl pkcs8 -topk8 -nocrypt -in "$1.key.tmp" -out "$1.key"
  rm -f "$1.key.tmp"
  printf '%b' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.crt" -days $days \
    -extfile "$1.ext" 2>/dev/null
  cat "$1.key" "$1.crt" > "$1.pem"   # key and certificate: a PEM keystore for Java
}
issue server "/CN=localhost" \
  "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
issue client "/O=Keel/OU=test/CN=client" \
  "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
# PKCS#12 stores and a JKS truststore for tools that want them (Kafka's own broker).
openssl pkcs12 -export -in server.crt -inkey server.key -certfile ca.pem -out server.p12 -passout pass:changeit -name server
openssl pkcs12 -export -in client.crt -inkey client.key -certfile ca.pem -out client.p12 -passout pass:changeit -name client
rm -f truststore.jks
keytool -importcert -noprompt -alias ca -file ca.pem -keystore truststore.jks -storepass changeit -storetype JKS >/dev/null 2>&1
echo "certificates in $dir"

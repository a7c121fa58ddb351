#!/usr/bin/env bash
# The cost of TLS and SASL, measured once: Kafka's ProducerPerformance (RECORDS x 1 KiB,
# acks=all, linger.ms=5, batch.size=65536, 6 partitions) over PLAINTEXT, SSL and
# SASL_SSL (SCRAM-SHA-512) of one broker, then SCRAM logins per second
# (compat/go/cmd/scrambench: each login a new connection, ApiVersions, SaslHandshake,
# two SaslAuthenticate round trips) on SASL_PLAINTEXT.
#
#   compat/security/bench.sh BASE_PORT [--kafka] [RECORDS]
#
# Ports as compat/security/run.sh. Prints one line per measurement.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base=${1:?usage: bench.sh BASE_PORT [--kafka] [RECORDS]}; shift
broker=keel
[[ "${1:-}" == --kafka ]] && { broker=kafka; shift; }
records=${1:-200000}
plain=$base sasl_plain=$((base + 2)) ssl=$((base + 3)) sasl_ssl=$((base + 4))
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-security-bench.XXXXXX")
certs=$work/certs
"$here/certs.sh" "$certs" >/dev/null
cp=$("$root/compat/kafka/classpath.sh")
java_tool() { java -Xmx1g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" "$@"; }

if [[ $broker == keel ]]; then
  "$root/compat/keel.sh" start "$work/broker" "$plain" --smp 2 \
    --listeners "PLAINTEXT://127.0.0.1:$plain,SASL_PLAINTEXT://127.0.0.1:$sasl_plain,SSL://127.0.0.1:$ssl,SASL_SSL://127.0.0.1:$sasl_ssl" \
    --tls-cert "$certs/server.crt" --tls-key "$certs/server.key" >/dev/null
  trap '"$root/compat/keel.sh" stop "$work/broker"; rm -rf "$work"' EXIT
else
  echo "bench.sh: --kafka is not wired yet (run.sh --kafka shows the listener setup)" >&2; exit 2
fi
java_tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$plain" --alter \
  --add-config 'SCRAM-SHA-512=[password=bench-secret]' --entity-type users --entity-name bench >/dev/null
sleep 1
cat >"$work/ssl.properties" <<P
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$certs/ca.pem
P
cat >"$work/sasl_ssl.properties" <<P
security.protocol=SASL_SSL
ssl.truststore.type=PEM
ssl.truststore.location=$certs/ca.pem
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="bench" password="bench-secret";
P
: >"$work/plaintext.properties"
for mode in plaintext:$plain ssl:$ssl sasl_ssl:$sasl_ssl; do
  name=${mode%%:*} port=${mode##*:}
  topic="bench-$name-$RANDOM"
  java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$plain" --create --topic "$topic" \
    --partitions 6 --replication-factor 1 >/dev/null
  final=$(java_tool org.apache.kafka.tools.ProducerPerformance --bootstrap-server "127.0.0.1:$port" \
    --topic "$topic" --num-records "$records" --record-size 1024 --throughput -1 \
    --command-config "$work/$name.properties" --command-property acks=all linger.ms=5 batch.size=65536 2>&1 \
    | grep -E '^[0-9]+ records sent, .* 99\.9th\.' | tail -n 1)
  echo "bench: $broker $name: $final"
done
(cd "$root/compat/go" && go build -o .bin/scrambench ./cmd/scrambench)
"$root/compat/go/.bin/scrambench" -seed "127.0.0.1:$sasl_plain" -user bench -pass bench-secret -mech 512 -n 2000 -c 4 \
  | sed "s/^/bench: $broker /"

#!/usr/bin/env bash
# The cost of TLS and SASL, Keel and Apache Kafka 4.x in one run: Kafka's
# ProducerPerformance (RECORDS x 1 KiB, acks=all, linger.ms=5, batch.size=65536, 6
# partitions, one producer) over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) of one
# broker, then SCRAM-SHA-512 logins per second (compat/go/cmd/scrambench: each login a
# new connection, ApiVersions, SaslHandshake, two SaslAuthenticate round trips,
# Metadata) on SASL_PLAINTEXT. Keel (--smp 2) runs first, then Kafka, one broker at a
# time on the same cores; last come the ratios Keel / Kafka and each broker's TLS cost
# (SSL MB/s over PLAINTEXT MB/s).
#
#   compat/security/bench.sh BASE_PORT [RECORDS]
#
# Ports: Keel PLAINTEXT BASE, SASL_PLAINTEXT BASE+2, SSL BASE+3, SASL_SSL BASE+4; Kafka
# the same from BASE+10 (its controller BASE+11).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base=${1:?usage: bench.sh BASE_PORT [RECORDS]}
records=${2:-200000}
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-security-bench.XXXXXX")
certs=$work/certs
"$here/certs.sh" "$certs" >/dev/null
cp=$("$root/compat/kafka/classpath.sh")
java_tool() { java -Xmx1g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" "$@"; }
stop_all() {
  "$root/compat/keel.sh" stop "$work/keel" >/dev/null 2>&1 || true
  "$root/compat/kafka/kafka.sh" stop "$work/kafka" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap stop_all EXIT
(cd "$root/compat/go" && go build -o .bin/scrambench ./cmd/scrambench)

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

start_keel() {
  local p=$1
  "$root/compat/keel.sh" start "$work/keel" "$p" --smp 2 \
    --listeners "PLAINTEXT://127.0.0.1:$p,SASL_PLAINTEXT://127.0.0.1:$((p + 2)),SSL://127.0.0.1:$((p + 3)),SASL_SSL://127.0.0.1:$((p + 4))" \
    --tls-cert "$certs/server.crt" --tls-key "$certs/server.key" >/dev/null
}

start_kafka() {
  local p=$1 jaas="org.apache.kafka.common.security.scram.ScramLoginModule required;"
  KAFKA_EXTRA_PROPS="listeners=PLAINTEXT://127.0.0.1:$p,CONTROLLER://127.0.0.1:$((p + 1)),SASL_PLAINTEXT://127.0.0.1:$((p + 2)),SSL://127.0.0.1:$((p + 3)),SASL_SSL://127.0.0.1:$((p + 4))
advertised.listeners=PLAINTEXT://127.0.0.1:$p,SASL_PLAINTEXT://127.0.0.1:$((p + 2)),SSL://127.0.0.1:$((p + 3)),SASL_SSL://127.0.0.1:$((p + 4))
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=$jaas
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$jaas
ssl.keystore.type=PEM
ssl.keystore.location=$certs/server.pem" \
    "$root/compat/kafka/kafka.sh" start "$work/kafka" "$p" >/dev/null
}

# bench BROKER PORT: one line per measurement, "bench: BROKER MODE: ...".
bench() {
  local broker=$1 p=$2 mode name port topic final
  java_tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$p" --alter \
    --add-config 'SCRAM-SHA-512=[password=bench-secret]' --entity-type users --entity-name bench >/dev/null
  sleep 2
  for mode in plaintext:$p ssl:$((p + 3)) sasl_ssl:$((p + 4)); do
    name=${mode%%:*} port=${mode##*:}
    topic="bench-$name-$RANDOM"
    java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$p" --create --topic "$topic" \
      --partitions 6 --replication-factor 1 >/dev/null
    final=$(java_tool org.apache.kafka.tools.ProducerPerformance --bootstrap-server "127.0.0.1:$port" \
      --topic "$topic" --num-records "$records" --record-size 1024 --throughput -1 \
      --command-config "$work/$name.properties" --command-property acks=all linger.ms=5 batch.size=65536 2>&1 \
      | grep -E '^[0-9]+ records sent, .* 99\.9th\.' | tail -n 1)
    echo "bench: $broker $name: $final"
  done
  "$root/compat/go/.bin/scrambench" -seed "127.0.0.1:$((p + 2))" -user bench -pass bench-secret -mech 512 -n 2000 -c 4 \
    | sed "s/^/bench: $broker scram: /"
}

start_keel "$base"
bench keel "$base" | tee "$work/results"
"$root/compat/keel.sh" stop "$work/keel" >/dev/null
start_kafka $((base + 10))
bench kafka $((base + 10)) | tee -a "$work/results"
"$root/compat/kafka/kafka.sh" stop "$work/kafka" >/dev/null

# MB/s and p99 of each mode, then logins a second, as ratios Keel / Kafka.
field() { grep -E "^bench: $1 $2: " "$work/results" | grep -oE "$3" | grep -oE '^[0-9.]+' | head -n 1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
for m in plaintext ssl sasl_ssl; do
  mb_keel=$(field keel $m '[0-9.]+ MB/sec') mb_kafka=$(field kafka $m '[0-9.]+ MB/sec')
  p99_keel=$(field keel $m '[0-9]+ ms 99th') p99_kafka=$(field kafka $m '[0-9]+ ms 99th')
  echo "ratio $m: MB/s keel/kafka $(ratio "$mb_keel" "$mb_kafka"), p99 keel/kafka $(ratio "$p99_keel" "$p99_kafka")"
done
echo "ratio scram logins/s keel/kafka $(ratio "$(field keel scram '[0-9.]+/s')" "$(field kafka scram '[0-9.]+/s')")"
echo "TLS cost (SSL MB/s over PLAINTEXT MB/s): keel $(ratio "$(field keel ssl '[0-9.]+ MB/sec')" "$(field keel plaintext '[0-9.]+ MB/sec')"), kafka $(ratio "$(field kafka ssl '[0-9.]+ MB/sec')" "$(field kafka plaintext '[0-9.]+ MB/sec')")"

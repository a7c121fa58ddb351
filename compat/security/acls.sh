#!/usr/bin/env bash
# ACLs end to end, Keel and Apache Kafka 4.x with StandardAuthorizer in the same run:
#   - the authorisation matrix (compat/java AclMatrixTest): every API it lists ×
#     {no ACL, allow, deny, prefixed allow, superuser} with the Java clients over
#     SASL_PLAINTEXT (PLAIN users), against both brokers; one check per cell, PASS
#     when Keel's outcome is Kafka's
#   - Kafka's kafka-acls tool against Keel: --add, --list, --remove
#
#   compat/security/acls.sh BASE_PORT [--keep]
#
# Ports: Keel PLAINTEXT BASE, SASL_PLAINTEXT BASE+2 (admin API BASE+100); Kafka
# PLAINTEXT BASE+10, controller BASE+11, SASL_PLAINTEXT BASE+12. Both brokers run with
# superusers User:admin and User:ANONYMOUS (Kafka's broker talks to its controller
# over the PLAINTEXT controller listener as ANONYMOUS, which must be a superuser; the
# matrix uses only the SASL listener). Prints "acls: N passed, M failed" last.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

base=${1:-}
[[ "$base" =~ ^[0-9]+$ ]] || { echo "usage: $0 BASE_PORT [--keep]" >&2; exit 2; }
keep=0
[[ "${2:-}" == "--keep" ]] && keep=1
keel_plain=$base keel_sasl=$((base + 2)) kafka_plain=$((base + 10)) kafka_sasl=$((base + 12))
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-acls.XXXXXX")
users=(admin u_none u_allow u_deny u_prefixed c_allow c_deny)
started=$SECONDS

. "$here/check.sh"

trap stop_keel_and_kafka EXIT

cp=$("$root/compat/kafka/classpath.sh") || { echo "acls: 0 passed, 1 failed (Kafka classpath)"; exit 1; }

keel_users=()
jaas="org.apache.kafka.common.security.plain.PlainLoginModule required"
for u in "${users[@]}"; do
  keel_users+=(--plain-user "$u:$u-secret")
  jaas+=" user_$u=\"$u-secret\""
done
jaas+=";"

"$root/compat/keel.sh" start "$work/keel" "$keel_plain" --smp 2 \
  --listeners "PLAINTEXT://127.0.0.1:$keel_plain,SASL_PLAINTEXT://127.0.0.1:$keel_sasl" \
  --sasl-enabled-mechanisms PLAIN --authorizer standard --superusers User:admin,User:ANONYMOUS \
  "${keel_users[@]}" >/dev/null || { echo "acls: 0 passed, 1 failed (Keel did not start)"; exit 1; }

KAFKA_EXTRA_PROPS="listeners=PLAINTEXT://127.0.0.1:$kafka_plain,CONTROLLER://127.0.0.1:$((kafka_plain + 1)),SASL_PLAINTEXT://127.0.0.1:$kafka_sasl
advertised.listeners=PLAINTEXT://127.0.0.1:$kafka_plain,SASL_PLAINTEXT://127.0.0.1:$kafka_sasl
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=$jaas
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS" \
  "$root/compat/kafka/kafka.sh" start "$work/kafka" "$kafka_plain" >/dev/null \
  || { echo "acls: 0 passed, 1 failed (Kafka did not start)"; exit 1; }
echo "acls: Keel SASL_PLAINTEXT :$keel_sasl, Kafka SASL_PLAINTEXT :$kafka_sasl (StandardAuthorizer)"

# The matrix: one check per cell.
java_out=$("$root/compat/java/run.sh" "127.0.0.1:$keel_plain" -Dtest=AclMatrixTest \
  -Dacl.keel="127.0.0.1:$keel_sasl" -Dacl.kafka="127.0.0.1:$kafka_sasl" -Dacl.out="$work/matrix.tsv" 2>&1)
echo "$java_out" >"$work/java.log"
if [[ -s "$work/matrix.tsv" ]]; then
  while IFS=$'\t' read -r api scenario keel kafka; do
    [[ "$api" == api || "$kafka" == n/a ]] && continue
    cell() { [[ "$1" == "$2" ]]; }
    check "matrix $api × $scenario: keel $keel, kafka $kafka" cell "$keel" "$kafka"
  done <"$work/matrix.tsv"
else
  check "AclMatrixTest ran (see $work/java.log)" false
fi

# kafka-acls against Keel: add, list, remove.
admin_props=$work/admin.properties
cat >"$admin_props" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret";
EOF
kafka_acls() {
  timeout 120 java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" org.apache.kafka.tools.AclCommand \
    --bootstrap-server "127.0.0.1:$keel_sasl" --command-config "$admin_props" "$@"
}
acls_add() {
  kafka_acls --add --allow-principal User:tool --operation Read --operation Write --topic tool-topic &&
    kafka_acls --add --allow-principal User:tool --operation Read --group tool- --resource-pattern-type prefixed
}
acls_list() {
  local out
  out=$(kafka_acls --list --topic tool-topic) && echo "$out" &&
    grep -q "principal=User:tool, host=\*, operation=READ, permissionType=ALLOW" <<<"$out" &&
    grep -q "operation=WRITE" <<<"$out" &&
    out=$(kafka_acls --list --resource-pattern-type prefixed) && echo "$out" && grep -q "name=tool-, patternType=PREFIXED" <<<"$out"
}
acls_remove() {
  local out
  kafka_acls --remove --force --allow-principal User:tool --operation Write --topic tool-topic &&
    out=$(kafka_acls --list --topic tool-topic) && echo "$out" &&
    grep -q "operation=READ" <<<"$out" && ! grep -q "operation=WRITE" <<<"$out"
}
check "kafka-acls --add (literal topic, prefixed group) against Keel" acls_add
check "kafka-acls --list against Keel" acls_list
check "kafka-acls --remove against Keel" acls_remove

echo "acls: $passed passed, $failed failed ($((SECONDS - started))s)"
((failed == 0))

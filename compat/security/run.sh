#!/usr/bin/env bash
# Security end to end with real clients: a broker with PLAINTEXT, SASL_PLAINTEXT, SSL
# (mutual TLS) and SASL_SSL listeners, certificates made here by certs.sh (openssl,
# keytool), SCRAM users created with Kafka's own kafka-configs tool, then:
#   - kafka-configs --alter --add-config 'SCRAM-SHA-512=[...]' --entity-type users, then
#     the same for SCRAM-SHA-256 (its --describe also asks DescribeClientQuotas, not served
#     yet: SecurityTest checks the description with Admin.describeUserScramCredentials)
#   - franz-go's TestSCRAMAuth and TestSCRAMAuthBadCredentials (KGO_TEST_SCRAM,
#     KGO_TEST_SCRAM_SEEDS on the SASL_PLAINTEXT listener), and TestOAuthAuth
#     (KGO_TEST_OAUTH_SEEDS: OAUTHBEARER with unsecured tokens on that listener)
#   - the rest of franz-go's allowlist (compat/go/allowlist.txt) over SASL_SSL with
#     SCRAM-SHA-512 on every client (a copy of the module whose helpers_test.go adds
#     the mechanism; results in compat/go/results-<broker>-sasl-ssl.tsv)
#   - Java clients (compat/java OAuthTest): produce/consume over OAUTHBEARER with Kafka's
#     unsecured login module; an expired and a garbage token refused with invalid_token;
#     mechanisms per listener: SASL_SSL enables only SCRAM-SHA-256/512
#     (--listener-sasl-mechanisms; Kafka's listener.name.sasl_ssl.sasl.enabled.mechanisms),
#     so OAUTHBEARER, accepted on SASL_PLAINTEXT, is refused there with
#     UnsupportedSaslMechanismException naming that listener's list;
#     a producer over SCRAM-SHA-512 for 4 session lifetimes with connections.max.reauth.ms
#     2000 (KIP-368), re-authenticating without an error (Keel: a second broker on
#     BASE+10/BASE+12 with --connections-max-reauth-ms 2000; Kafka: the SASL_PLAINTEXT
#     listener's scram-sha-512.connections.max.reauth.ms), and with Keel its
#     keel_sasl_reauthentications_total counted
#   - Java clients (compat/java SecurityTest): produce/consume over mutual TLS and over
#     SASL_SSL SCRAM-SHA-512; a wrong password refused (SaslAuthenticationException);
#     no client certificate refused on the SSL listener
#   - librdkafka (confluent-kafka, compat/security/test_librdkafka_security.py): produce/
#     consume over mutual TLS and over SASL_SSL SCRAM-SHA-256; a wrong password refused;
#     a producer over SCRAM-SHA-256 re-authenticating for 4 session lifetimes (KIP-368)
#   - with Keel: ACLs, compat/security/acls.sh on ports BASE+20.. (the authorisation
#     matrix against Keel and Apache Kafka with StandardAuthorizer, and kafka-acls), and
#     client quotas, compat/security/quotas.sh on ports BASE+40.. (against Keel and Kafka)
#
#   compat/security/run.sh BASE_PORT [--kafka] [--keep]
#
# Ports: PLAINTEXT BASE, SASL_PLAINTEXT BASE+2, SSL BASE+3, SASL_SSL BASE+4 (BASE+1 is
# Kafka's controller; Keel's admin API is BASE+100); Keel's re-authentication broker
# BASE+10 and BASE+12 (admin BASE+110). --kafka runs the same checks
# against Apache Kafka 4.x configured with the same listeners (the oracle). Prints
# "security: N passed, M failed" last; exits non-zero if any check failed.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

base=${1:-}
[[ "$base" =~ ^[0-9]+$ ]] || { echo "usage: $0 BASE_PORT [--kafka] [--keep]" >&2; exit 2; }
shift
broker=keel keep=0
while (($#)); do
  case "$1" in
    --kafka) broker=kafka ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 BASE_PORT [--kafka] [--keep]" >&2; exit 2 ;;
  esac
  shift
done
plain=$base sasl_plain=$((base + 2)) ssl=$((base + 3)) sasl_ssl=$((base + 4))
reauth_plain=$((base + 10)) reauth_sasl=$((base + 12))
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-security.XXXXXX")
certs=$work/certs
user=alice password=alice-secret
started=$SECONDS

. "$here/check.sh"

cleanup() {
  [[ -n ${side:-} ]] && wait "$side"
  case $broker in
    keel)
      "$root/compat/keel.sh" stop "$work/broker" >/dev/null 2>&1
      "$root/compat/keel.sh" stop "$work/reauth" >/dev/null 2>&1
      ;;
    kafka) "$root/compat/kafka/kafka.sh" stop "$work/broker" >/dev/null 2>&1 ;;
  esac
  if ((failed == 0 && keep == 0)); then rm -rf "$work"; else echo "work directory kept: $work"; fi
}
trap cleanup EXIT

"$here/certs.sh" "$certs" >/dev/null || { echo "security: 0 passed, 1 failed (certs.sh)"; exit 1; }
cp=$("$root/compat/kafka/classpath.sh") || { echo "security: 0 passed, 1 failed (Kafka classpath)"; exit 1; }

case $broker in
  keel)
    "$root/compat/keel.sh" start "$work/broker" "$plain" --smp 2 \
      --listeners "PLAINTEXT://127.0.0.1:$plain,SASL_PLAINTEXT://127.0.0.1:$sasl_plain,SSL://127.0.0.1:$ssl,SASL_SSL://127.0.0.1:$sasl_ssl" \
      --tls-cert "$certs/server.crt" --tls-key "$certs/server.key" --tls-ca "$certs/ca.pem" \
      --sasl-enabled-mechanisms PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER \
      --listener-sasl-mechanisms SASL_SSL=SCRAM-SHA-256,SCRAM-SHA-512 \
      --scram-user admin:SCRAM-SHA-512:admin-secret >/dev/null \
      || { echo "security: 0 passed, 1 failed (Keel did not start)"; exit 1; }
    "$root/compat/keel.sh" start "$work/reauth" "$reauth_plain" --smp 1 \
      --listeners "PLAINTEXT://127.0.0.1:$reauth_plain,SASL_PLAINTEXT://127.0.0.1:$reauth_sasl" \
      --connections-max-reauth-ms 2000 --scram-user "$user:SCRAM-SHA-512:$password" \
      --scram-user "$user:SCRAM-SHA-256:$password" >/dev/null \
      || { echo "security: 0 passed, 1 failed (Keel's re-authentication broker did not start)"; exit 1; }
    reauth=127.0.0.1:$reauth_sasl
    ;;
  kafka)
    jaas="org.apache.kafka.common.security.scram.ScramLoginModule required;"
    oauth_jaas="org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    reauth=127.0.0.1:$sasl_plain
    KAFKA_EXTRA_PROPS="listeners=PLAINTEXT://127.0.0.1:$plain,CONTROLLER://127.0.0.1:$((plain + 1)),SASL_PLAINTEXT://127.0.0.1:$sasl_plain,SSL://127.0.0.1:$ssl,SASL_SSL://127.0.0.1:$sasl_ssl
advertised.listeners=PLAINTEXT://127.0.0.1:$plain,SASL_PLAINTEXT://127.0.0.1:$sasl_plain,SSL://127.0.0.1:$ssl,SASL_SSL://127.0.0.1:$sasl_ssl
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=$oauth_jaas
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=$oauth_jaas
listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms=2000
listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms=2000
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=$jaas
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=$jaas
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$jaas
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$jaas
ssl.keystore.type=PEM
ssl.keystore.location=$certs/server.pem
ssl.truststore.type=PEM
ssl.truststore.location=$certs/ca.pem
listener.name.ssl.ssl.client.auth=required" \
      "$root/compat/kafka/kafka.sh" start "$work/broker" "$plain" >/dev/null \
      || { echo "security: 0 passed, 1 failed (Kafka did not start)"; exit 1; }
    ;;
esac
echo "security: $broker with PLAINTEXT :$plain, SASL_PLAINTEXT :$sasl_plain, SSL :$ssl (mTLS), SASL_SSL :$sasl_ssl"

configs() {
  local class
  for class in org.apache.kafka.tools.ConfigCommand kafka.admin.ConfigCommand; do
    timeout 120 java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" "$class" \
      --bootstrap-server "127.0.0.1:$plain" "$@" 2>"$work/configs.err"
    local rc=$?
    grep -q "ClassNotFoundException\|Could not find or load main class" "$work/configs.err" || { cat "$work/configs.err"; return $rc; }
  done
  return 1
}
# One mechanism per call: Kafka refuses two changes of one user in one request
# (DUPLICATE_RESOURCE), which kafka-configs sends for two mechanisms at once.
scram_users() {
  configs --alter --add-config "SCRAM-SHA-512=[password=$password]" --entity-type users --entity-name "$user" &&
    configs --alter --add-config "SCRAM-SHA-256=[iterations=8192,password=$password]" --entity-type users --entity-name "$user"
}
check "kafka-configs creates SCRAM-SHA-256/512 credentials" scram_users
# Credentials reach the listeners once the metadata has them.
sleep 2

# ACLs (acls.sh: the authorisation matrix against Keel and Kafka with StandardAuthorizer,
# and kafka-acls against Keel) and client quotas (quotas.sh) start a Keel and a Kafka of
# their own on ports BASE+20.. and BASE+40.. and mostly wait out throttles: they run
# beside the checks below, one after the other. The Java tests are compiled first: two
# Maven runs in compat/java at once must not both compile.
side=
if [[ $broker == keel ]]; then
  (cd "$root/compat/java" && mvn -B -ntp -q test-compile >"$work/java-compile.log" 2>&1)
  { "$here/acls.sh" $((base + 20)) >"$work/acls.log" 2>&1; "$here/quotas.sh" $((base + 40)) >"$work/quotas.log" 2>&1; } &
  side=$!
fi

# franz-go's own SCRAM tests, from its kgo integration suite.
kgo() {
  local name=$1 out
  out=$(cd "$root/compat/go" && KGO_SEEDS=127.0.0.1:$plain KGO_TEST_RF=1 KGO_TEST_SCRAM_SEEDS=127.0.0.1:$sasl_plain \
    KGO_TEST_SCRAM=$user:$password:512 KGO_TEST_OAUTH_SEEDS=127.0.0.1:$sasl_plain timeout 600 go test -count=1 -vet=off -v -run "^$name\$" \
    github.com/twmb/franz-go/pkg/kgo 2>&1)
  echo "$out"
  grep -q -- "--- PASS: $name " <<<"$out"
}
check "franz-go TestSCRAMAuth (SCRAM-SHA-512, SASL_PLAINTEXT)" kgo TestSCRAMAuth
check "franz-go TestSCRAMAuthBadCredentials" kgo TestSCRAMAuthBadCredentials
check "franz-go TestOAuthAuth (OAUTHBEARER unsecured tokens, SASL_PLAINTEXT)" kgo TestOAuthAuth

# The rest of franz-go's allowlist over SASL_SSL. The suite's clients dial TLS with
# KGO_TEST_TLS but authenticate only in its SCRAM tests, so a copy of the module made
# here (used through go test -modfile with a replace; the module cache is left as it
# is) has one change in helpers_test.go: with KGO_TEST_SASL_ALL set, every client it
# makes also takes the SCRAM mechanism. The tests are franz-go's, unchanged.
allowlist_sasl_ssl() {
  local src dir="$work/kgo" results
  src=$(cd "$root/compat/go" && go list -m -f '{{.Dir}}' github.com/twmb/franz-go) || return 1
  mkdir -p "$dir" && cp -r "$src" "$dir/franz-go" && chmod -R u+w "$dir/franz-go" || return 1
  cp "$root/compat/go/go.mod" "$root/compat/go/go.sum" "$dir/"
  echo "replace github.com/twmb/franz-go => $dir/franz-go" >>"$dir/go.mod"
  sed -i 's|^\tif testCert != nil {$|\tif saslScram != nil \&\& os.Getenv("KGO_TEST_SASL_ALL") != "" {\n\t\topts = append(opts, SASL(saslScram))\n\t}\n&|' \
    "$dir/franz-go/pkg/kgo/helpers_test.go"
  grep -q KGO_TEST_SASL_ALL "$dir/franz-go/pkg/kgo/helpers_test.go" || { echo "franz-go's helpers_test.go changed: no place to add SASL"; return 1; }
  # TestIssue769 dials with its own Dialer, which franz-go refuses beside a TLS config
  # (its client is then nil and the test binary panics), whatever the broker.
  echo "SKIPPED over SASL_SSL: TestIssue769 (sets its own Dialer; franz-go refuses one with TLS)"
  GO_TEST_EXTRA_FLAGS="-modfile=$dir/go.mod -skip ^TestIssue769\$" KGO_TEST_TLS="ca:$certs/ca.pem" KGO_TEST_SCRAM=$user:$password:512 \
    KGO_TEST_SASL_ALL=1 RESULTS_LABEL=$broker-sasl-ssl timeout 1200 "$root/compat/go/run.sh" "127.0.0.1:$sasl_ssl"
  results="$root/compat/go/results-$broker-sasl-ssl.tsv"
  cat "$results"
  awk -F'\t' 'NR > 1 { n++; if ($2 == "pass") p++ } END { printf "franz-go allowlist over SASL_SSL: %d of %d passed\n", p, n; exit !(n > 0 && p == n) }' "$results"
}
check "franz-go allowlist over SASL_SSL (SCRAM-SHA-512 on every client; TestIssue769 skipped: its own Dialer)" allowlist_sasl_ssl

# Java clients over OAUTHBEARER, and re-authenticating (KIP-368): one check per test.
oauth_out=$("$root/compat/java/run.sh" "127.0.0.1:$plain" -Dtest=OAuthTest -Dsec.oauth="127.0.0.1:$sasl_plain" \
  -Dsec.reauth="$reauth" -Dsec.user="$user" -Dsec.password="$password" -Dsec.sasl_ssl="127.0.0.1:$sasl_ssl" \
  -Dsec.ca="$certs/ca.pem" 2>&1)
echo "$oauth_out" >"$work/java-oauth.log"
for t in produceConsumeOverOAuthBearerWithUnsecuredTokens expiredTokenIsRefused garbageTokenIsRefused \
  producerReauthenticatesAcrossSessionLifetimes oauthBearerIsOfferedOnlyOnTheListenersThatEnableIt; do
  java_oauth_test() { grep -qE "Tests run: [1-9]" "$work/java-oauth.log" && ! grep -qE "\[ERROR\].*OAuthTest[.#]$1" "$work/java-oauth.log"; }
  check "Java OAuthTest.$t" java_oauth_test "$t"
done
if [[ $broker == keel ]]; then
  reauths() {
    local n
    n=$(curl -sf "http://127.0.0.1:$((reauth_plain + 100))/metrics" | awk '/^keel_sasl_reauthentications_total/ {s += $2} END {print s + 0}')
    echo "keel_sasl_reauthentications_total $n"
    ((n > 0))
  }
  check "Keel counts re-authentications (keel_sasl_reauthentications_total > 0)" reauths
fi

# Java clients: one check per test of SecurityTest.
java_out=$("$root/compat/java/run.sh" "127.0.0.1:$plain" -Dtest=SecurityTest -Dsec.ssl="127.0.0.1:$ssl" \
  -Dsec.sasl_ssl="127.0.0.1:$sasl_ssl" -Dsec.ca="$certs/ca.pem" -Dsec.client_pem="$certs/client.pem" \
  -Dsec.user="$user" -Dsec.password="$password" 2>&1)
echo "$java_out" >"$work/java.log"
for t in scramCredentialsAreDescribed produceConsumeOverMutualTls produceConsumeOverSaslSslScram512 wrongPasswordIsRefused \
  noClientCertificateIsRefusedOnTheMutualTlsListener; do
  java_test() { grep -qE "Tests run: [1-9]" "$work/java.log" && ! grep -qE "\[ERROR\].*SecurityTest[.#]$1" "$work/java.log"; }
  check "Java SecurityTest.$t" java_test "$t"
done

# librdkafka.
py_out=$(SEC_SSL=127.0.0.1:$ssl SEC_SASL_SSL=127.0.0.1:$sasl_ssl SEC_REAUTH=$reauth SEC_CERTS=$certs SEC_USER=$user \
  SEC_PASSWORD=$password "$root/compat/python/run.sh" "127.0.0.1:$plain" -v -p no:cacheprovider \
  "$here/test_librdkafka_security.py" 2>&1)
echo "$py_out" >"$work/python.log"
for t in test_produce_consume_over_mutual_tls test_produce_consume_over_sasl_ssl_scram_sha_256 \
  test_wrong_password_is_refused test_producer_reauthenticates_across_session_lifetimes; do
  check "librdkafka $t" grep -q "$t PASSED" "$work/python.log"
done

# The ACL and quota checks that ran beside the rest, counted here.
if [[ -n $side ]]; then
  wait "$side"
  for part in acls quotas; do
    grep -E '^(PASS|FAIL) |^     ' "$work/$part.log"
    passed=$((passed + $(grep -c '^PASS ' "$work/$part.log")))
    failed=$((failed + $(grep -c '^FAIL ' "$work/$part.log")))
    grep -qE "^$part: [0-9]+ passed" "$work/$part.log" || { echo "FAIL $part.sh (see $work/$part.log)"; failed=$((failed + 1)); }
  done
fi

echo "security: $passed passed, $failed failed ($broker, $((SECONDS - started))s)"
((failed == 0))

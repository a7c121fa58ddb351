#!/usr/bin/env bash
# Keel's test command: builds Keel, runs the Rust tests, starts a broker and drives it
# with real Kafka clients (Java, franz-go, librdkafka, kafka-python, Kafka's own tools).
# Installs what it needs itself (Maven artifacts, Go modules, pip packages).
#
#   ./test.sh --quick    the fast tier (at most 5 minutes once built): the module-graph
#                        check, unit and property tests, a few seeds of each
#                        simulation, and one round trip through librdkafka and
#                        kafka-python against a fresh broker
#   ./test.sh            the default run (about 20 minutes on a 2-core machine once built,
#                        25 when the broker and its tests must be rebuilt;
#                        a clean checkout first spends about 10 minutes compiling)
#   ./test.sh --full     also MirrorMaker 2 and Connect (compat/migration, single node and
#                        a 3-node Keel, about 3.5 minutes each), franz-go's whole suite
#                        (not only the allowlist), the Java, Python and
#                        ClientCompatibilityTest suites against the 3-node cluster, each
#                        fault class alone with more rounds (pauses, whole-cluster kills,
#                        clock skew, packet loss, offsets on loopback), a 10-minute
#                        mixed-fault run, the differential tester's long profile (2,000
#                        sequences, about 10 minutes), and the transactional copier with
#                        50,000 messages, 3 kills and copier kills
#   ./test.sh --oracle   also run the client suites against Apache Kafka 4.x, and the
#                        queue workload against a 3-node Kafka under leader kills
#   ./test.sh --stress   run the consumer-group stress rounds (3 -> 4 members under CPU
#                        load, librdkafka and Java) 10 times per protocol, not 2
#
# Ends with one line "test.sh: N passed, N failed, N skipped" over every test counted.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"
full=0 oracle=0 quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    --full) full=1 ;;
    --oracle) oracle=1 ;;
    --stress)
      export KEEL_GROUP_STRESS_ROUNDS=${KEEL_GROUP_STRESS_ROUNDS:-10}
      export PYTHON_SUITE_TIMEOUT=${PYTHON_SUITE_TIMEOUT:-1800}
      ;;
    *) echo "usage: $0 [--quick] [--full] [--oracle] [--stress]" >&2; exit 2 ;;
  esac
done
port=${KEEL_TEST_PORT:-18092}
run_dir="$root/target/test-run"
logs="$run_dir/logs"
rm -rf "$run_dir"; mkdir -p "$logs"
passed=0 failed=0 skipped=0
declare -a summary

note() { printf '\n=== %s (at %dm%02ds) ===\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
record() { # name passed failed skipped
  passed=$((passed + $2)); failed=$((failed + $3)); skipped=$((skipped + $4))
  summary+=("$(printf '%-28s %4s passed %4s failed %4s skipped' "$1" "$2" "$3" "$4")")
}
# fault_stage NAME LOG PATTERN CMD...: runs a fault harness with its output in
# $logs/LOG. Exit 0 passes (the summary lines matching PATTERN are shown), 77 is a
# skip said out loud (a missing capability: root, namespaces, nft, libfaketime), any
# other status fails with the log's tail.
fault_stage() {
  local name=$1 log=$logs/$2 pattern=$3 rc=0
  shift 3
  "$@" >"$log" 2>&1 || rc=$?
  case $rc in
    0) grep -E "$pattern" "$log" | tail -n 3; record "$name" 1 0 0 ;;
    77) grep -E "^SKIP" "$log" | tail -n 1; echo "SKIP: $name not run (see above)"; record "$name" 0 0 1 ;;
    *) tail -n 25 "$log"; record "$name" 0 1 0 ;;
  esac
}
# Counts a suite that produced no parsable summary as one failure.
record_or_fail() { if [[ -n "$2" ]]; then record "$1" $2; else record "$1" 0 1 0; fi; }

surefire_counts() { # sums the Surefire totals line
  grep -E "^\[(INFO|ERROR|WARNING)\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$" "$1" | tail -n 1 |
    sed -E 's/.*Tests run: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+), Skipped: ([0-9]+)/\1 \2 \3 \4/' |
    awk '{print $1-$2-$3-$4, $2+$3, $4}'
}
pytest_counts() {
  tail -n 3 "$1" | grep -E "passed|failed" | tail -n 1 |
    awk '{p=f=s=0; for(i=1;i<=NF;i++){if($(i+1) ~ /^passed/)p=$i; if($(i+1) ~ /^(failed|error)/)f+=$i; if($(i+1) ~ /^skipped/)s=$i} print p, f, s}'
}

note "module graphs (compat/tools/modgraph.py: no import cycle among a crate's top-level modules)"
# Each entry: a crate's source folder and the largest cycle it may still have.
graphs_ok=1
for entry in protocol/src:0 raft/src:0 tuning/src:0 storage/src:0 broker/src:0; do
  python3 compat/tools/modgraph.py "${entry%%:*}" --check "${entry##*:}" || graphs_ok=0
done
if ((graphs_ok)); then record "module graphs" 1 0 0; else record "module graphs" 0 1 0; fi

note "build"
# One cargo run builds the binaries (keel, the differential tester in compat/diff, the
# queue checker in compat/queue) and every Rust test: one feature set for all, and the
# broker library and its unit-test build compile side by side, each keeping a core busy
# while the other is in rustc's serial front end.
crates=(-p keel-protocol -p keel-storage -p keel-raft -p keel-broker -p keel-tuning -p keel-queue-check -p keel-diff)
if ! cargo build --release --bins --tests "${crates[@]}" 2>&1 | tail -n 3; then echo "build failed"; exit 1; fi

summarize() {
  note "summary (logs in $logs)"
  printf '%s\n' "${summary[@]}"
  echo "test.sh: $passed passed, $failed failed, $skipped skipped"
  ((failed == 0))
}

if ((quick)); then
  note "quick: unit and property tests, a few seeds of each simulation"
  # The long integration targets (real brokers, kill -9, clusters) are left to the full run.
  KEEL_RAFT_SIM_SEEDS=20 KEEL_CLUSTER_SIM_SEEDS=8 cargo test --release --no-fail-fast "${crates[@]}" --lib --bins \
    --test decoders_never_panic --test hostile_messages --test simulation --test cluster_simulation \
    2>&1 | tee "$logs/cargo-test.log" | grep -E "^test result|panicked|FAILED"
  # Storage's simulation and model tests live in its one integration target.
  KEEL_STORAGE_SIM_SEEDS=8 KEEL_MODEL_CASES=4 cargo test --release --no-fail-fast "${crates[@]}" --test storage \
    -- simulation:: model:: 2>&1 | tee -a "$logs/cargo-test.log" | grep -E "^test result|panicked|FAILED"
  counts=$(awk '/^test result:/ {for(i=1;i<=NF;i++){if($(i+1) ~ /^passed/)p+=$i; if($(i+1) ~ /^failed/)f+=$i; if($(i+1) ~ /^ignored/)s+=$i}} END {if (NR) print p+0, f+0, s+0}' "$logs/cargo-test.log")
  record_or_fail "rust (quick)" "$counts"
  note "quick: librdkafka and kafka-python round trips against Keel on 127.0.0.1:$port"
  if compat/keel.sh start "$run_dir/keel" "$port" --smp 2 --config "$root/compat/keel-test.yaml"; then
    compat/python/run.sh "127.0.0.1:$port" test_a_confluent_roundtrip.py test_c_kafka_python.py >"$logs/quick-python.log" 2>&1
    tail -n 1 "$logs/quick-python.log"
    record_or_fail "quick python round trip" "$(pytest_counts "$logs/quick-python.log")"
    compat/keel.sh stop "$run_dir/keel"
  else
    record "keel start" 0 1 0
  fi
  summarize
  exit
fi

note "Rust tests (unit, storage recovery, Raft simulation, bad input, multi-shard, kill -9)"
cargo test --release --no-fail-fast "${crates[@]}" 2>&1 | tee "$logs/cargo-test.log" | grep -E "^test |test result|panicked" 
counts=$(awk '/^test result:/ {for(i=1;i<=NF;i++){if($(i+1) ~ /^passed/)p+=$i; if($(i+1) ~ /^failed/)f+=$i; if($(i+1) ~ /^ignored/)s+=$i}} END {if (NR) print p+0, f+0, s+0}' "$logs/cargo-test.log")
record_or_fail "rust (cargo test)" "$counts"

java_suite() { # label bootstrap
  note "$1: Java clients 4.x (producer, consumer, admin)"
  compat/java/run.sh "$2" >"$logs/$1-java.log" 2>&1
  grep -E "Tests run:|FAIL" "$logs/$1-java.log" | tail -n 8
  record_or_fail "$1 java" "$(surefire_counts "$logs/$1-java.log")"
}

client_compat() { # label bootstrap
  note "$1: ClientCompatibilityTest"
  compat/java/client-compat.sh "$2" >"$logs/$1-client-compat.log" 2>&1
  tail -n 2 "$logs/$1-client-compat.log"
  record_or_fail "$1 client-compat" "$(grep -E '^client-compat: [0-9]+ passed' "$logs/$1-client-compat.log" | sed -E 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\1 \2 0/')"
}

python_suite() { # label bootstrap
  note "$1: librdkafka (confluent-kafka) and kafka-python"
  compat/python/run.sh "$2" >"$logs/$1-python.log" 2>&1
  tail -n 3 "$logs/$1-python.log"
  record_or_fail "$1 python" "$(pytest_counts "$logs/$1-python.log")"
}

client_suites() { # label bootstrap
  local label=$1 bootstrap=$2
  java_suite "$label" "$bootstrap"
  client_compat "$label" "$bootstrap"
  python_suite "$label" "$bootstrap"

  note "$label: franz-go kgo integration suite"
  local go_args=("$bootstrap"); ((full)) && go_args+=(--all)
  RESULTS_LABEL="$label" compat/go/run.sh "${go_args[@]}" >"$logs/$label-franz-go.log" 2>&1
  grep -E "^(SKIP|FAIL|franz-go:)" "$logs/$label-franz-go.log" | tail -n 20
  record_or_fail "$label franz-go" "$(grep -E '^franz-go: [0-9]+ passed' "$logs/$label-franz-go.log" | tail -n 1 | sed -E 's/franz-go: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/')"

  note "$label: ProducerPerformance 1,000,000 x 1 KiB acks=all, then ConsumerPerformance"
  compat/java/perf.sh "$bootstrap" "${PERF_RECORDS:-1000000}" >"$logs/$label-perf.log" 2>&1
  local rc=$?
  grep -E "^perf:" "$logs/$label-perf.log" || tail -n 5 "$logs/$label-perf.log"
  if ((rc == 0)); then record "$label perf" 1 0 0; else record "$label perf" 0 1 0; fi
}

note "start Keel on 127.0.0.1:$port"
# Two data directories: shards spread over them and LogDirsTest moves a partition between them.
if compat/keel.sh start "$run_dir/keel" "$port" --smp "${KEEL_TEST_SMP:-2}" --config "$root/compat/keel-test.yaml" \
    --data-dir "$run_dir/keel/data2"; then
  client_suites keel "127.0.0.1:$port"
  note "Kafka's command-line tools against Keel (compat/tools: topics, configs, console, groups, offsets, log dirs)"
  TMPDIR="$run_dir" compat/tools/run.sh "127.0.0.1:$port" >"$logs/tools.log" 2>&1
  grep -E "^(PASS|FAIL|tools:)" "$logs/tools.log"
  record_or_fail "kafka tools" "$(sed -nE 's/^tools: ([0-9]+) passed, ([0-9]+) failed.*/\1 \2 0/p' "$logs/tools.log")"
  compat/keel.sh stop "$run_dir/keel"
  if grep -q "panicked" "$run_dir/keel/keel.log"; then
    echo "Keel panicked during the run:"; grep -A5 panicked "$run_dir/keel/keel.log" | head -20
    record "keel no-panic check" 0 1 0
  else
    record "keel no-panic check" 1 0 0
  fi
else
  record "keel start" 0 1 0
fi

# Transactions driven by Kafka's own tools (compat/txn), each with a fresh Keel of its own:
# TransactionalMessageCopier copying exactly once while Keel is kill -9ed and restarted,
# then kafka-transactions.sh (list, describe, describe-producers, find-hanging, abort).
# A failed run keeps its directory (broker and tool logs) under $run_dir.
copier_args=(--port $((port + 8000)) --messages 30000 --kills 2 --txn-size 100)
((full)) && copier_args=(--port $((port + 8000)) --messages 50000 --kills 3 --kill-copiers)
note "transactions: TransactionalMessageCopier across Keel kill -9 (${copier_args[*]:2})"
TMPDIR="$run_dir" compat/txn/copier.sh "${copier_args[@]}" >"$logs/txn-copier.log" 2>&1
copier_rc=$?
grep -E "^copier: (kill|broker=|FAIL)" "$logs/txn-copier.log" || tail -n 20 "$logs/txn-copier.log"
if ((copier_rc == 0)); then record "txn copier (kill -9)" 1 0 0; else record "txn copier (kill -9)" 0 1 0; fi
note "transactions: kafka-transactions.sh against Keel"
TMPDIR="$run_dir" compat/txn/tools.sh --port $((port + 8100)) >"$logs/txn-tools.log" 2>&1
grep -E "^(PASS|FAIL|txn-tools:)" "$logs/txn-tools.log"
record_or_fail "txn kafka-transactions.sh" "$(sed -nE 's/^txn-tools: ([0-9]+) passed, ([0-9]+) failed.*/\1 \2 0/p' "$logs/txn-tools.log")"

note "security: SSL (mTLS), SASL_PLAINTEXT and SASL_SSL (SCRAM) listeners with Java, librdkafka, franz-go and kafka-configs"
TMPDIR="$run_dir" compat/security/run.sh $((port + 8200)) >"$logs/security.log" 2>&1
grep -E "^(PASS|FAIL|security:)" "$logs/security.log"
record_or_fail "security (TLS, SASL)" "$(sed -nE 's/^security: ([0-9]+) passed, ([0-9]+) failed.*/\1 \2 0/p' "$logs/security.log")"

migration() { # label port-offset [--cluster]
  MIGRATION_BASE_PORT=$((port + $2)) compat/migration/run.sh ${3:-} >"$logs/$1.log" 2>&1
  grep -E "figure:|^=+ .*(passed|failed)|^DIFFERENT|^migration:" "$logs/$1.log" | tail -n 12
  # pytest's summary, then the guide's commands (compare.py, kafka-consumer-groups).
  record_or_fail "$1 (MM2, Connect)" "$(pytest_counts <(grep -E "^=+ .*(passed|failed)" "$logs/$1.log"))"
  if grep -q "^migration: guide commands ok" "$logs/$1.log"; then record "$1 guide commands" 1 0 0
  else record "$1 guide commands" 0 1 0; fi
}
if ((full)); then
  note "migration: MirrorMaker 2 from Apache Kafka into Keel; a Kafka Connect worker on Keel"
  migration migration 6000
  note "migration into a 3-node Keel, replication factor 3 (compat/migration/run.sh --cluster)"
  migration migration-cluster 6500 --cluster
fi

diff_args=(--seed "${DIFF_SEED:-7}"); ((full)) && diff_args+=(--long)
note "differential tester against Apache Kafka (compat/diff, ${diff_args[*]})"
DIFF_KAFKA_PORT=$((port + 7000)) DIFF_KEEL_PORT=$((port + 7100)) compat/diff/run.sh "${diff_args[@]}" \
  >"$logs/diff.log" 2>&1
diff_rc=$?
grep -E "^diff: sequences" "$logs/diff.log" || tail -n 20 "$logs/diff.log"
if ((diff_rc == 0)); then record "differential tester" 1 0 0; else
  grep -E "^DIVERGENCE #[0-9]+:.*OPEN" "$logs/diff.log" | head -n 20
  record "differential tester" 0 1 0
fi

# A 3-node cluster (one shard each), topics with replication factor 3: the client
# suites (franz-go with KGO_TEST_RF=3, Java with KEEL_TEST_RF=3), Kafka's reassignment
# tool, group coordinator failover, then the leader-kill ledger (an idempotent acks=all producer while the
# leader is killed; nothing acknowledged may be lost, duplicated or reordered).
cluster_dir="$run_dir/cluster" cluster_base=$((port + 3000))
cluster_bootstrap="127.0.0.1:$cluster_base,127.0.0.1:$((cluster_base + 1)),127.0.0.1:$((cluster_base + 2))"
note "start a 3-node Keel cluster on 127.0.0.1:$cluster_base-$((cluster_base + 2))"
if compat/cluster.sh start 3 "$cluster_dir" "$cluster_base"; then
  note "cluster: franz-go kgo integration suite, KGO_TEST_RF=3"
  KGO_TEST_RF=3 RESULTS_LABEL=keel-cluster compat/go/run.sh "$cluster_bootstrap" >"$logs/cluster-franz-go.log" 2>&1
  grep -E "^(SKIP|FAIL|franz-go:)" "$logs/cluster-franz-go.log" | tail -n 20
  record_or_fail "cluster franz-go (RF 3)" "$(grep -E '^franz-go: [0-9]+ passed' "$logs/cluster-franz-go.log" | tail -n 1 | sed -E 's/franz-go: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/')"
  if ((full)); then
    python_suite cluster "$cluster_bootstrap"
    KEEL_TEST_RF=3 java_suite cluster "$cluster_bootstrap"
    CCT_NUM_CLUSTER_NODES=3 client_compat cluster "$cluster_bootstrap"
  fi
  note "cluster: kafka-reassign-partitions moves every partition of an RF 2 topic"
  compat/reassign.sh "$cluster_bootstrap" >"$logs/cluster-reassign.log" 2>&1
  grep -E "^figure:|^reassign: [0-9]+ passed" "$logs/cluster-reassign.log"
  record_or_fail "cluster reassignment" "$(sed -nE 's/^reassign: ([0-9]+) passed, ([0-9]+) failed$/\1 \2 0/p' "$logs/cluster-reassign.log")"
  # Last on this cluster: it kill -9s a node (and restarts it).
  note "cluster: group coordinator failover (kafka-python)"
  KEEL_CLUSTER_DIR="$cluster_dir" compat/python/run.sh "$cluster_bootstrap" cluster_failover.py -s \
    >"$logs/cluster-failover.log" 2>&1
  failover=$(pytest_counts "$logs/cluster-failover.log")
  read -r _ failed_tests _ <<<"${failover:-0 1 0}"
  if ((failed_tests == 0)); then
    grep -E "^figure:|^=+ .*(passed|failed)" "$logs/cluster-failover.log" | tail -n 2
  else
    grep -v "^%" "$logs/cluster-failover.log" | tail -n 30
  fi
  record_or_fail "cluster group failover" "$failover"
  compat/cluster.sh stop "$cluster_dir"
  if grep -q "panicked" "$cluster_dir"/node-*/keel.log; then
    grep -A5 panicked "$cluster_dir"/node-*/keel.log | head -20
    record "cluster no-panic check" 0 1 0
  else
    record "cluster no-panic check" 1 0 0
  fi
else
  record "cluster start" 0 1 0
fi
# Beside the ledger, the queue workload (Jepsen's Kafka queue test): transactional
# workers send and poll over rotating keys; keel-queue-check judges the history with
# Jepsen's queue checks and adya's list-append analysis (aborted reads, write-read cycles).
# Here the workers are one consumer group, each transaction committing its polls'
# offsets (exactly-once consumption); in the mixed stage each follows every key alone.
note "cluster: leader-kill ledger and queue workload as a consumer group (${LEDGER_KILLS:-5} kills; ./test.sh --full: 20)"
kills=${LEDGER_KILLS:-5}; ((full)) && kills=20
fault_stage "cluster leader-kill ledger" ledger.log "^(ledger: (failover|kills)|queue-check: (anomalies|one consumer group))" \
  env LEDGER_BASE_PORT=$((port + 4000)) compat/ledger/run.sh --kills "$kills" -- -queue 3 -queue-group
note "cluster: transactional ledger (4 kills, partition leader and transaction coordinator in turn; ./test.sh --full: 12)"
txn_kills=4; ((full)) && txn_kills=12
fault_stage "cluster transactional ledger" ledger-txn.log "^ledger: txn (commit_stall|kills)" \
  env LEDGER_BASE_PORT=$((port + 4200)) compat/ledger/run.sh --kills "$txn_kills" -- -txn

# The network-partition proof (compat/faults/partition.sh): the leader of partition 0
# is cut off from both followers with nft rules in its own network namespace while
# the clients still reach it, then healed. Needs root, `ip netns` and nft; without
# them the stage says SKIP and counts as skipped, never as passed.
note "cluster: network partitions (${PARTITION_ROUNDS:-3} rounds; ./test.sh --full: 5)"
rounds=${PARTITION_ROUNDS:-3}; ((full)) && rounds=5
fault_stage "cluster network partition" partition.log "^(partition: rounds|ledger: rounds)" \
  env PARTITION_PORT=$((port + 5000)) compat/faults/partition.sh --rounds "$rounds"
# Every fault class mixed (compat/faults/soak.sh --netns): leader kills and pauses,
# whole-cluster kills, whole-cluster power cuts (files cut back to what was fsynced,
# tails torn), a leader restarted with its clock up to 10 min off, the leader cut off
# from its peers, the leader and a follower cut apart, the leader cut off from the
# clients, 5-20% packet loss, bits flipped in a follower's segment, the leader's
# clock stepped while it runs and the leader's disk filled (each node's data directory
# on a loop file system; without loop devices the run says `soak: WITHOUT disk-full
# rounds`), dealt with a seed (every class once before any comes again), for 2 minutes
# in network namespaces; the ledger's checks, identical replicas and progress within
# 10 s of each round (5 s of freeing a disk);
# the queue workload beside the ledger, its history checked by keel-queue-check.
# --full also runs each class alone with more rounds, and 30 minutes mixed is
# `compat/faults/soak.sh --netns --minutes 30` (docs/reliability.md).
soak_minutes=2; ((full)) && soak_minutes=10
note "cluster: every fault class mixed ($soak_minutes min, seed ${SOAK_SEED:-7}, network namespaces; ./test.sh --full: 10 min)"
fault_stage "cluster mixed faults" soak.log "^(class |mixed rounds:|ledger: mixed_rounds|replicas:|queue-check: anomalies|soak: WITHOUT)" \
  env SOAK_PORT=$((port + 5200)) compat/faults/soak.sh --netns --minutes "$soak_minutes" --seed "${SOAK_SEED:-7}"
# Committed group offsets (compat/faults/offsets.sh --netns): clients commit and read
# one group's offsets, one request per operation, while its coordinator is killed, cut
# off from its peers and paused in turn; porcupine checks the history for
# linearizability.
secs=30; ((full)) && secs=120
note "cluster: group offsets linearizable ($secs s: the coordinator killed, cut off or paused in turn; namespaces; ./test.sh --full: 120 s, and on loopback too)"
fault_stage "cluster offsets linearizable" offsets-netns.log "^offsets: (commits|operations)" \
  env OFFSETS_PORT=$((port + 5500)) compat/faults/offsets.sh --netns --seconds "$secs"

if ((full)); then
  # Each fault class alone, with more rounds than the mixed stage draws.
  note "cluster: leader-pause ledger (10 SIGSTOP/SIGCONT of 2 s)"
  fault_stage "cluster leader-pause ledger" ledger-pause.log "^ledger: (failover|kills)" \
    env LEDGER_BASE_PORT=$((port + 4100)) compat/ledger/run.sh --kills 10 -- -fault pause -down 2s
  note "cluster: whole-cluster kill ledger (every node kill -9ed at once, down 3 s, all restarted; 6 rounds)"
  fault_stage "cluster whole-cluster kill" ledger-crash-all.log "^(crash-all rounds|ledger: crash-all_rounds)" \
    env LEDGER_BASE_PORT=$((port + 4300)) compat/ledger/run.sh --kills 6 -- -fault crash-all
  note "cluster: clock-skew ledger (the leader restarted with its wall clock up to 10 min off, libfaketime; 10 rounds)"
  fault_stage "cluster clock-skew ledger" ledger-skew.log "^(skew rounds|ledger: skew_rounds)" \
    env LEDGER_BASE_PORT=$((port + 4300)) compat/ledger/run.sh --skew --kills 10
  note "cluster: packet loss (6 rounds)"
  fault_stage "cluster packet loss" drop.log "^(drop rounds|ledger: drop_rounds)" \
    env PARTITION_PORT=$((port + 5000)) compat/faults/partition.sh --fault drop --rounds 6
  # One minute each of the classes soak.sh added last (namespaces; a full disk needs
  # loop file systems, else the stage says SKIP).
  for class in disk-full bitflip cut step; do
    note "cluster: $class rounds alone (1 min, namespaces)"
    if [[ $class == disk-full ]]; then loop=(env KEEL_NETNS_LOOP_MIB=1024); else loop=(); fi
    fault_stage "cluster $class rounds" "soak-$class.log" "^($class rounds:|ledger: ${class}_rounds|replicas:)" \
      ${loop[@]+"${loop[@]}"} env SOAK_PORT=$((port + 5200)) compat/faults/soak.sh --netns --minutes 1 --seed 8 -- -fault "$class"
  done
  note "cluster: group offsets linearizable on loopback (120 s of coordinator kills and pauses)"
  fault_stage "cluster offsets, loopback" offsets.log "^offsets: (commits|operations)" \
    env OFFSETS_PORT=$((port + 5500)) compat/faults/offsets.sh --seconds 120
fi

if ((oracle)); then
  note "start Apache Kafka (oracle) on 127.0.0.1:$((port + 1000))"
  if compat/kafka/kafka.sh start "$run_dir/kafka" "$((port + 1000))"; then
    client_suites kafka "127.0.0.1:$((port + 1000))"
    compat/kafka/kafka.sh stop "$run_dir/kafka"
  else
    record "kafka start" 0 1 0
  fi
  # The queue workload against a 3-node Kafka under leader kills: the checker must find
  # nothing Kafka's transactions forbid there either (write cycles are permitted).
  note "Apache Kafka 3-node cluster: queue workload under 3 leader kills"
  fault_stage "kafka queue workload" queue-kafka.log "^queue-check: anomalies" \
    env LEDGER_BASE_PORT=$((port + 4400)) compat/ledger/run.sh --kafka --kills 3 -- -queue 3
fi

summarize

#!/usr/bin/env bash
# Kafka's kafka-transactions.sh (org.apache.kafka.tools.TransactionsCommand, kafka-tools
# 4.4.0) against a broker, around two transactions left open on purpose:
#
#   a topic of 2 partitions gets 5 plain records on each; then two transactional
#   producers (compat/txn/TxnProbe.java, Java client 4.4.0) each send 3 records, one to
#   partition 0 (transactional id <run>-a), one to partition 1 (<run>-b), and neither
#   commits. Checks, each printed PASS or FAIL:
#     - read_committed ListOffsets of partition 0 stops at 5 (the open transaction's start)
#     - `list` shows <run>-a as Ongoing
#     - `describe --transactional-id <run>-a`: Ongoing, partition 0 among its partitions
#     - `describe` of an unknown transactional id fails as not found
#     - `describe-producers --topic --partition 0`: <run>-a's producer id with
#       CurrentTransactionStartOffset 5 (DescribeProducers, API 61)
#     - `find-hanging --topic --max-transaction-timeout 0`: the open transactions are
#       candidates (DescribeProducers), but their coordinator still lists their
#       partitions (ListTransactions, DescribeTransactions): none is hanging
#     - `abort --topic --partition 0 --start-offset 5` (finds the producer through
#       DescribeProducers, then WriteTxnMarkers): read_committed end offset moves past 5
#     - `abort --topic --partition 1 --producer-id --producer-epoch --coordinator-epoch 0`
#       (ids from `describe`; WriteTxnMarkers only): read_committed end offset moves past 5
#     - the producers' own aborts (EndTxn) then succeed and `describe` shows CompleteAbort
#     - per partition, a read_committed consumer then reads only the 5 plain records, and
#       both isolation levels end at the same offset
#
#   compat/txn/tools.sh [--kafka | --bootstrap HOST:PORT] [--port P] [--keep]
#
# Default: a fresh Keel (compat/keel.sh start DIR P --smp 2) on 127.0.0.1:P (default
# 26192; admin API P+100); --kafka: a fresh Apache Kafka (compat/kafka/kafka.sh);
# --bootstrap: a broker already running. A check that needs an API the broker does not
# serve fails and says "not supported". Prints "txn-tools: N passed, M failed" last;
# exits non-zero if any check failed. The work directory (every tool's output) is kept
# when a check fails or with --keep.
set -uo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

broker=keel port=${TXN_TOOLS_PORT:-26192} bootstrap="" keep=0
while (($#)); do
  case "$1" in
    --kafka) broker=kafka; shift ;;
    --bootstrap) broker=external bootstrap=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--kafka | --bootstrap HOST:PORT] [--port P] [--keep]" >&2; exit 2 ;;
  esac
done
bootstrap=${bootstrap:-127.0.0.1:$port}
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-txn-tools.XXXXXX")
broker_dir=$work/broker broker_port=$port
run="txn-tools-$(date +%s)-$RANDOM"
topic="$run-topic" txn_a="$run-a" txn_b="$run-b"
plain=5 open_records=3
# Longer than the run: only the tool may end these transactions.
open_timeout_ms=600000
passed=0 failed=0 rc=1 started=$SECONDS
declare -A producer_pid

cleanup() {
  local side
  for side in "${!producer_pid[@]}"; do
    kill -KILL "${producer_pid[$side]}" 2>/dev/null && wait "${producer_pid[$side]}" 2>/dev/null
  done
  broker_stop >/dev/null 2>&1
  if ((rc == 0 && keep == 0)); then rm -rf "$work"; else echo "txn-tools: tool outputs in $work" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

finish() {
  echo "txn-tools: $passed passed, $failed failed ($((SECONDS - started)) s)"
  ((failed == 0)) && rc=0
  exit "$rc"
}
abort_run() { echo "txn-tools: FAIL: $*"; failed=$((failed + 1)); finish; }
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1${2:+ -- $2}"; failed=$((failed + 1)); }

# kafka-transactions.sh NAME ARGS...: stdout in $work/NAME.out, stderr in $work/NAME.err,
# both echoed indented; the exit status is the tool's.
transactions() {
  local name=$1; shift
  echo "\$ kafka-transactions.sh --bootstrap-server $bootstrap $*"
  tool org.apache.kafka.tools.TransactionsCommand --bootstrap-server "$bootstrap" "$@" \
    >"$work/$name.out" 2>"$work/$name.err"
  local code=$?
  sed 's/^/    /' "$work/$name.out"
  grep -v '^\[' "$work/$name.err" | sed 's/^/    stderr: /'
  return "$code"
}

# Why a tool run failed: "not supported: ..." when the broker lacks the API, else the
# tool's own message.
why() {
  local name=$1 api=$2 code=$3 message
  message=$(grep -v '^\[' "$work/$name.err" | head -n 1 | sed 's/ Enable debug logging for additional detail\.//')
  if grep -qiE "UnsupportedVersion|does not support" "$work/$name.err"; then
    echo "not supported: the broker does not serve $api; the tool says: $message"
  else
    echo "exit status $code: $message"
  fi
}

# offsets PARTITION -> "read_committed=N read_uncommitted=M"
offsets() { probe offsets "$bootstrap" "$topic" "$1" 2>>"$work/probe.err"; }

# Waits until partition P's read_committed end offset is past OFFSET (10 s bound).
lso_moves_past() {
  local p=$1 offset=$2 line
  for _ in $(seq 1 20); do
    line=$(offsets "$p")
    [[ $line =~ read_committed=([0-9]+) ]] && ((BASH_REMATCH[1] > offset)) && { echo "$line"; return 0; }
    sleep 0.5
  done
  echo "$line"
  return 1
}

start_open_transaction() { # side transactional-id partition
  local side=$1
  mkfifo "$work/$side.in"
  ( probe_bg open "$bootstrap" "$2" "$topic" "$3" "$open_records" "$open_timeout_ms" ) \
    <"$work/$side.in" >"$work/$side.out" 2>"$work/$side.err" &
  producer_pid[$side]=$!
  # Held open for the producer's commands ("abort", "quit") until the end of the run.
  if [[ $side == a ]]; then exec 7>"$work/$side.in"; else exec 8>"$work/$side.in"; fi
  for _ in $(seq 1 120); do
    grep -qx open "$work/$side.out" && return 0
    kill -0 "${producer_pid[$side]}" 2>/dev/null || break
    sleep 0.5
  done
  tail -n 5 "$work/$side.err"
  return 1
}

txn_classpath || abort_run "no Kafka classpath"
probe_build || abort_run "TxnProbe.java does not compile"
if [[ $broker != external ]]; then
  port_in_use "$port" && abort_run "port $port is in use (use --port)"
  broker_start >"$work/broker-start.log" 2>&1 || { cat "$work/broker-start.log"; abort_run "the broker did not start"; }
fi
echo "txn-tools: $(broker_describe); topic $topic"

tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create --topic "$topic" \
  --partitions 2 --replication-factor 1 >"$work/topic.log" 2>&1 || { cat "$work/topic.log"; abort_run "cannot create $topic"; }
for p in 0 1; do
  probe produce "$bootstrap" "$topic" "$p" "$plain" 2>>"$work/probe.err" || abort_run "cannot write $plain plain records to partition $p"
done
start_open_transaction a "$txn_a" 0 || abort_run "the transactional producer $txn_a did not start its transaction"
start_open_transaction b "$txn_b" 1 || abort_run "the transactional producer $txn_b did not start its transaction"
echo "txn-tools: $txn_a holds a transaction open on $topic-0, $txn_b on $topic-1 ($open_records records each, after $plain plain ones)"

line=$(offsets 0)
if [[ $line == "read_committed=$plain read_uncommitted=$((plain + open_records))" ]]; then
  pass "an open transaction holds partition 0's read_committed end offset at its start ($line)"
else
  fail "an open transaction holds partition 0's read_committed end offset at its start" "got '$line'"
fi

if transactions list list &&
    awk -v id="$txn_a" '$1 == id && $4 == "Ongoing" { found = 1 } END { exit !found }' "$work/list.out"; then
  pass "list: $txn_a is Ongoing"
else
  fail "list: $txn_a is Ongoing" "$(why list ListTransactions $?)"
fi

# describe: CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState
#           TransactionTimeoutMs CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions
describe_row() { awk -v id="$1" '$2 == id { print }' "$work/$2.out"; }
if transactions describe-a describe --transactional-id "$txn_a"; then
  read -r _ _ pid_a epoch_a state parts_a <<<"$(describe_row "$txn_a" describe-a | awk '{ print $1, $2, $3, $4, $5, $9 }')"
  if [[ $state == Ongoing && ",$parts_a," == *",$topic-0,"* ]]; then
    pass "describe --transactional-id: Ongoing, producer id $pid_a epoch $epoch_a, partitions $parts_a"
  else
    fail "describe --transactional-id: Ongoing with $topic-0" "state '$state', partitions '$parts_a'"
  fi
else
  fail "describe --transactional-id" "$(why describe-a DescribeTransactions $?)"
fi

if transactions describe-unknown describe --transactional-id "$run-unknown"; then
  fail "describe of an unknown transactional id fails" "it succeeded"
elif grep -q "could not be found" "$work/describe-unknown.err"; then
  pass "describe of an unknown transactional id fails: ...$(grep -m1 -o 'failed because the ID could not be found' "$work/describe-unknown.err")"
else
  fail "describe of an unknown transactional id fails as not found" "$(why describe-unknown DescribeTransactions 1)"
fi

# describe-producers: ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence
#                     LastTimestamp CurrentTransactionStartOffset
if transactions describe-producers describe-producers --topic "$topic" --partition 0; then
  if awk -v pid="${pid_a:-x}" -v start="$plain" '$1 == pid && $6 == start { found = 1 } END { exit !found }' \
      "$work/describe-producers.out"; then
    pass "describe-producers: producer $pid_a with CurrentTransactionStartOffset $plain"
  else
    fail "describe-producers: producer ${pid_a:-?} with CurrentTransactionStartOffset $plain" "not in the table"
  fi
else
  fail "describe-producers --topic --partition" "$(why describe-producers "DescribeProducers (API 61)" $?)"
fi

if transactions find-hanging find-hanging --topic "$topic" --max-transaction-timeout 0; then
  rows=$(grep -vc '^Topic' "$work/find-hanging.out")
  if grep -q '^Topic' "$work/find-hanging.out" && ((rows == 0)); then
    pass "find-hanging: the open transactions are not hanging (their coordinator lists their partitions)"
  else
    fail "find-hanging: no hanging transaction" "$rows rows"
  fi
else
  fail "find-hanging --topic" "$(why find-hanging "DescribeProducers (API 61)" $?)"
fi

if transactions abort-start-offset abort --topic "$topic" --partition 0 --start-offset "$plain"; then
  if line=$(lso_moves_past 0 "$plain"); then
    pass "abort --start-offset $plain: partition 0's read_committed end offset moved past it ($line)"
  else
    fail "abort --start-offset $plain: partition 0's read_committed end offset moves past it" "still '$line'"
  fi
else
  fail "abort --topic --partition --start-offset" "$(why abort-start-offset "DescribeProducers (API 61)" $?)"
fi

# The transaction on partition 1, named by the ids `describe` gives; coordinator epoch 0
# (what the tool itself uses when DescribeProducers reports none).
if transactions describe-b describe --transactional-id "$txn_b" >/dev/null; then
  read -r pid_b epoch_b <<<"$(describe_row "$txn_b" describe-b | awk '{ print $3, $4 }')"
fi
if [[ -z "${pid_b:-}" ]]; then
  fail "abort --producer-id --producer-epoch --coordinator-epoch" "no producer id for $txn_b from describe"
elif transactions abort-ids abort --topic "$topic" --partition 1 --producer-id "$pid_b" \
    --producer-epoch "$epoch_b" --coordinator-epoch 0; then
  if line=$(lso_moves_past 1 "$plain"); then
    pass "abort --producer-id $pid_b --producer-epoch $epoch_b --coordinator-epoch 0: partition 1's read_committed end offset moved past $plain ($line)"
  else
    fail "abort --producer-id --producer-epoch --coordinator-epoch: partition 1's read_committed end offset moves past $plain" "still '$line'"
  fi
else
  fail "abort --producer-id --producer-epoch --coordinator-epoch" "$(why abort-ids WriteTxnMarkers $?)"
fi

# The producers end their own transactions: EndTxn(abort) at the coordinator.
echo abort >&7
echo abort >&8
for _ in $(seq 1 60); do grep -qx aborted "$work/a.out" && grep -qx aborted "$work/b.out" && break; sleep 0.5; done
if grep -qx aborted "$work/a.out" && grep -qx aborted "$work/b.out" &&
    transactions describe-a-end describe --transactional-id "$txn_a" &&
    [[ $(describe_row "$txn_a" describe-a-end | awk '{ print $5 }') == CompleteAbort ]]; then
  pass "the producers' own aborts (EndTxn) after the tool's succeed; describe shows CompleteAbort"
else
  fail "the producers' own aborts (EndTxn) after the tool's succeed; describe shows CompleteAbort" \
    "$(cat "$work/a.out" "$work/b.out" | tr '\n' ' ')$(grep -hv '^\[' "$work/a.err" "$work/b.err" | grep -m1 -i exception)"
fi
echo quit >&7; echo quit >&8
exec 7>&- 8>&-

# Nothing is open now: a read_committed consumer reads the plain records and none of
# the aborted ones, and both isolation levels end at the same offset.
for p in 0 1; do
  line=$(offsets "$p") count=$(probe count "$bootstrap" "$topic" "$p" 2>>"$work/probe.err")
  if [[ $count == "$plain" && $line =~ read_committed=([0-9]+)\ read_uncommitted=([0-9]+) ]] &&
      ((BASH_REMATCH[1] == BASH_REMATCH[2])); then
    pass "partition $p: a read_committed consumer reads only the $plain plain records ($line)"
  else
    fail "partition $p: a read_committed consumer reads only the $plain plain records" "read ${count:-?} records; $line"
  fi
done

if broker_panicked; then
  fail "Keel did not panic" "$(grep -m1 panicked "$broker_dir/keel.log")"
fi
finish

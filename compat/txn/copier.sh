#!/usr/bin/env bash
# Exactly-once copying across broker crashes, driven by Kafka's own
# org.apache.kafka.tools.TransactionalMessageCopier (kafka-tools 4.4.0) the way Kafka's
# system test tests/kafkatest/tests/core/transactions_test.py drives it:
#
#   1. an input topic of 3 partitions is written first by Kafka's VerifiableProducer
#      (acks=all; the values 0..N-1, each once) and an output topic of 3 partitions made;
#   2. one copier per input partition (transactional ids <run>-0..2, one consumer group,
#      --use-group-metadata, transactions of --txn-size records, transaction timeout
#      40 s) consumes with read_committed and, per transaction, sends each record to the
#      same partition of the output topic and commits the consumer's position with
#      sendOffsetsToTransaction (--group-mode: one copier subscribes to the whole topic
#      instead, so its offsets go through a group with a generation and a member id);
#   3. while they copy, the broker is kill -9ed (the pid keel.sh / kafka.sh records) and
#      restarted each time the group's committed offsets pass another 1/(K+1) of the
#      input (--kill-copiers: one copier is kill -9ed with it, in turn, as the system
#      test's hard client bounce does); a copier that dies is started again with the same
#      transactional id and group, as long as its partition's committed offset is short
#      of the end;
#   4. once every committed offset is at the end of its partition, a read_committed
#      consumer reads the output: every input value must be there exactly once, and each
#      output partition must hold its input partition's sequence in order.
#
#   compat/txn/copier.sh [--kafka | --bootstrap HOST:PORT] [--port P] [--messages N]
#                        [--kills K] [--txn-size S] [--group-mode] [--kill-copiers] [--keep]
#
# Default: a fresh Keel (compat/keel.sh start DIR P --smp 2, target/release/keel or
# KEEL_BIN) on 127.0.0.1:P (default 26092; admin API P+100). --kafka: a fresh Apache Kafka
# (compat/kafka/kafka.sh, controller on P+1) instead, killed the same way. --bootstrap:
# a broker already running; nothing is started or killed (--kills is 0).
# Defaults: 20,000 messages, 3 kills, 300 records per transaction. The work directory
# (broker, copier, monitor and seed logs) is kept when the run fails or with --keep.
# Prints one line "copier: ..." last; exits non-zero on a failure.
set -uo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

broker=keel port=${TXN_COPIER_PORT:-26092} bootstrap="" messages=20000 kills=3 txn_size=300 group_mode=0 kill_copiers=0 keep=0
usage() {
  echo "usage: $0 [--kafka | --bootstrap HOST:PORT] [--port P] [--messages N] [--kills K] [--txn-size S] [--group-mode] [--kill-copiers] [--keep]" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --kafka) broker=kafka; shift ;;
    --bootstrap) broker=external bootstrap=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    --messages) messages=${2:?}; shift 2 ;;
    --kills) kills=${2:?}; shift 2 ;;
    --txn-size) txn_size=${2:?}; shift 2 ;;
    --group-mode) group_mode=1; shift ;;
    --kill-copiers) kill_copiers=1; shift ;;
    --keep) keep=1; shift ;;
    *) usage ;;
  esac
done
[[ $broker == external ]] && kills=0
bootstrap=${bootstrap:-127.0.0.1:$port}
transaction_timeout_ms=40000
# No committed progress for this long (broker restarts included) fails the run.
stall_seconds_max=120
partitions=3
copiers=$partitions
((group_mode)) && copiers=1

work=$(mktemp -d "${TMPDIR:-/tmp}/keel-txn-copier.XXXXXX")
broker_dir=$work/broker broker_port=$port
run="txn-copier-$(date +%s)-$RANDOM"
input="$run-in" output="$run-out" group="$run-group"
# copier_pid: the copier JVM (to kill); copier_job: its wrapper (to wait on).
declare -a copier_pid copier_job copier_finished
monitor_pid="" monitor_job="" rc=1 kills_done=0 copier_kills=0 restarts=0 copy_seconds=0
missing="?" duplicated="?" unexpected="?" reordered="?"
started=$SECONDS

cleanup() {
  local pid
  for pid in "${copier_pid[@]}" $monitor_pid; do
    [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null
  done
  wait
  broker_stop >/dev/null 2>&1
  if ((rc == 0 && keep == 0)); then rm -rf "$work"; else echo "copier: logs in $work" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

summary() {
  echo "copier: broker=$broker mode=$( ((group_mode)) && echo group || echo partition) messages=$messages kills=$kills_done copier_kills=$copier_kills copier_restarts=$restarts" \
    "missing=$missing duplicated=$duplicated unexpected=$unexpected reordered_partitions=$reordered" \
    "seconds=$copy_seconds total_seconds=$((SECONDS - started))"
}
fail() { echo "copier: FAIL: $*"; summary; exit 1; }

txn_classpath || fail "no Kafka classpath"
probe_build || fail "TxnProbe.java does not compile"
if [[ $broker != external ]]; then
  port_in_use "$port" && fail "port $port is in use (use --port)"
  echo "copier: starting a $(broker_describe)"
  broker_start >"$work/broker-start.log" 2>&1 || { cat "$work/broker-start.log"; fail "the broker did not start"; }
fi
echo "copier: $(broker_describe); $messages messages, $kills kills, $txn_size records per transaction"

for topic in "$input" "$output"; do
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create --topic "$topic" \
    --partitions "$partitions" --replication-factor 1 >>"$work/topics.log" 2>&1 ||
    { cat "$work/topics.log"; fail "cannot create topic $topic"; }
done

# Seed: Kafka's VerifiableProducer writes the values 0..N-1, acks=all.
tool org.apache.kafka.tools.VerifiableProducer --bootstrap-server "$bootstrap" --topic "$input" \
  --max-messages "$messages" --acks -1 --throughput -1 >"$work/seed.log" 2>"$work/seed.err"
acked=$(sed -nE 's/.*"name":"tool_data".*"acked":([0-9]+).*/\1/p' "$work/seed.log")
[[ "$acked" == "$messages" ]] || fail "seeding: $acked of $messages acknowledged (see $work/seed.log)"
echo "copier: seeded $messages values into $input (3 partitions)"

start_copier() {
  local i=$1 mode=()
  ((group_mode)) && mode=(--group-mode)
  echo "=== start $(date +%T.%N)" >>"$work/copier-$i.log"
  bg_run "$work/copier-$i.log" java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" \
    org.apache.kafka.tools.TransactionalMessageCopier --broker-list "$bootstrap" \
    --input-topic "$input" --input-partition "$i" --output-topic "$output" \
    --transactional-id "$run-$i" --consumer-group "$group" --use-group-metadata "${mode[@]}" \
    --transaction-size "$txn_size" --transaction-timeout "$transaction_timeout_ms"
  copier_pid[i]=$bg_pid copier_job[i]=$bg_job copier_finished[i]=0
}

bg_run "$work/monitor.log" probe_bg monitor "$bootstrap" "$group" "$input" 250
monitor_pid=$bg_pid monitor_job=$bg_job
copy_started=$SECONDS
for i in $(seq 0 $((copiers - 1))); do start_copier "$i"; done

declare -a committed end
# Whether copier i's partition (every partition in group mode) is short of its end.
short() {
  local p
  for p in "${!committed[@]}"; do
    ((group_mode || p == $1)) && ((committed[p] < end[p])) && return 0
  done
  return 1
}
known=0 total=0 last_total=-1 last_progress=$SECONDS resume_state=0 resume_from=0 killed_at=0 killed_ms=0 asked_ms=0 start_job=""
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
deadline=$((SECONDS + 300 + kills * 90 + messages / 500))
while :; do
  sleep 0.25
  line=$(tail -n 20 "$work/monitor.log" 2>/dev/null | grep -E '^(committed|unavailable)' | tail -n 1)
  if [[ $line =~ ^committed=([0-9,]+)\ end=([0-9,]+)\ at=([0-9]+)$ ]]; then
    asked_ms=${BASH_REMATCH[3]}
    IFS=, read -r -a committed <<<"${BASH_REMATCH[1]}"
    IFS=, read -r -a end <<<"${BASH_REMATCH[2]}"
    known=1 total=0 done_partitions=0
    for i in "${!committed[@]}"; do
      total=$((total + committed[i]))
      ((committed[i] >= end[i])) && done_partitions=$((done_partitions + 1))
    done
    ((total > last_total)) && last_total=$total last_progress=$SECONDS
    # After a kill: the first answer asked for after it shows the restarted broker
    # serving; the first one above that shows transactions committing again.
    if ((resume_state > 0 && asked_ms > killed_ms)); then
      if ((resume_state == 1)); then
        echo "copier:   broker answers again $(since "$killed_at") s after kill $kills_done (committed=$total)"
        resume_from=$total resume_state=2
      elif ((total > resume_from)); then
        echo "copier:   committed progress again $(since "$killed_at") s after kill $kills_done (committed=$total)"
        resume_state=0
      fi
    fi
    ((done_partitions == partitions)) && break
  else
    known=0
  fi
  ((SECONDS - last_progress > stall_seconds_max)) && fail "no committed progress for ${stall_seconds_max}s (committed=$total of $messages; last monitor line: $line)"
  ((SECONDS > deadline)) && fail "not done within $((deadline - copy_started))s (committed=$total of $messages)"

  # The broker restarts in the background: the copiers' progress is watched meanwhile
  # (kafka.sh notices a restarted Kafka many seconds after it serves again).
  if [[ -n "$start_job" ]] && ! kill -0 "$start_job" 2>/dev/null; then
    wait "$start_job" || { tail -n 30 "$work/broker-start.log"; fail "the broker did not restart after kill $kills_done"; }
    start_job=""
    echo "copier:   broker ready again (start script returned) $(since "$killed_at") s after kill $kills_done"
  fi
  if [[ -z "$start_job" ]] && ((known && kills_done < kills && total * (kills + 1) >= messages * (kills_done + 1))); then
    kills_done=$((kills_done + 1))
    killed_at=$(date +%s.%N) resume_state=1
    killed_ms=$(date +%s%3N)
    broker_kill || fail "kill -9 of the broker failed"
    echo "copier: kill $kills_done: kill -9 of the broker at committed=$total of $messages"
    if ((kill_copiers)); then
      victim=$(((kills_done - 1) % copiers))
      [[ -n "${copier_pid[victim]}" ]] && kill -KILL "${copier_pid[victim]}" 2>/dev/null &&
        copier_kills=$((copier_kills + 1)) && echo "copier:   copier $victim kill -9ed with the broker"
    fi
    sleep 1
    bg_run "$work/broker-start.log" broker_start
    start_job=$bg_job
    last_progress=$SECONDS
    continue
  fi

  # A copier that died while its partition is short of the end starts again, with the
  # same transactional id and group; its InitProducerId aborts what it left open. One
  # that exits 0 has committed up to the end it saw at its start, which is the end of the
  # input (written before): it is done, and were its offsets short, the stall bound fails
  # the run.
  for i in $(seq 0 $((copiers - 1))); do
    ((copier_finished[i])) && continue
    job=${copier_job[i]}
    if [[ -n "$job" ]]; then
      kill -0 "$job" 2>/dev/null && continue
      wait "$job"; code=$?
      copier_pid[i]="" copier_job[i]=""
      if ((code == 0)); then
        copier_finished[i]=1
        continue
      fi
      echo "copier:   copier $i exited with status $code (committed offsets last seen: ${committed[*]} of ${end[*]})"
    fi
    if ((known)) && short "$i"; then
      restarts=$((restarts + 1))
      echo "copier:   copier $i starts again (same transactional id and group)"
      start_copier "$i"
    fi
  done
done
copy_seconds=$((SECONDS - copy_started))
if [[ -n "$start_job" ]]; then
  wait "$start_job" || fail "the broker did not restart after kill $kills_done"
fi
echo "copier: every committed offset at the end of its partition after ${copy_seconds}s"

# The copiers stop by themselves once they reach the end they saw when they started.
for i in $(seq 0 $((copiers - 1))); do
  job=${copier_job[i]}
  [[ -n "$job" ]] || continue
  for _ in $(seq 1 120); do kill -0 "$job" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$job" 2>/dev/null; then
    echo "copier:   copier $i still running 60 s after its partition was complete; stopping it"
    kill -KILL "${copier_pid[i]}" 2>/dev/null
  fi
  wait "$job"
  copier_pid[i]="" copier_job[i]=""
done
kill -KILL "$monitor_pid" 2>/dev/null; wait "$monitor_job"; monitor_pid=""

probe verify "$bootstrap" "$input" "$output" >"$work/verify.log" 2>&1
sed 's/^/copier:   /' "$work/verify.log" | grep -v '^copier:   \[' | tail -n 6
result=$(tail -n 1 "$work/verify.log")
[[ $result =~ missing=([0-9]+)\ duplicated=([0-9]+)\ unexpected=([0-9]+)\ order_mismatch_partitions=([0-9]+) ]] ||
  fail "the read_committed check did not finish (see $work/verify.log)"
missing=${BASH_REMATCH[1]} duplicated=${BASH_REMATCH[2]} unexpected=${BASH_REMATCH[3]} reordered=${BASH_REMATCH[4]}
[[ $result =~ input=$messages\ input_not_unique=0 ]] || fail "the input is not $messages unique values: $result"

broker_panicked && fail "Keel panicked (see $broker_dir/keel.log)"
((kills_done == kills)) || fail "only $kills_done of $kills kills happened before the copy finished"
((missing == 0 && duplicated == 0 && unexpected == 0 && reordered == 0)) || fail "the output is not an exactly-once copy"
rc=0
summary

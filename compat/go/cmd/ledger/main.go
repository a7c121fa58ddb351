// Command ledger is the leader-kill ledger: an idempotent acks=all franz-go
// producer writes ids at a fixed rate to a replicated topic while the harness
// kill -9s the leader of partition 0 again and again; at the end it reads every
// partition back and checks that no acknowledged id was lost, none is there twice,
// and each partition holds its ids in increasing order.
//
//	ledger -cluster-dir DIR -cluster-sh compat/cluster.sh -brokers H:P,H:P,H:P [-kills 20] [-rate 1000]
//
// The brokers are nodes 1..n of a cluster started with compat/cluster.sh in DIR,
// listed in node order. It prints one line per kill, a table, and last the line
//
//	ledger: kills=K acked=N lost=0 duplicates=0 reordered=0 gap_ms median=X max=Y ...
//
// The gap of a kill is the longest time without an acknowledgement on a partition
// the killed node led, from the kill to the next kill (or the end), starting at the
// last acknowledgement before; the any-partition gap is the same over all
// partitions together. Failover is the time from the kill until each partition it
// led had an acknowledgement of a record written in a later leader epoch (the
// epochs come from the read-back), so that acknowledgements still on the wire from
// the dead leader do not count.
//
// With -txn it is the transactional ledger instead (txn.go): transactional
// producers write multi-partition transactions, commit most and abort some, while
// partition 0's leader and the transaction coordinators are killed in turn; the
// read-back under read_committed must show every committed transaction whole, no
// aborted one, nothing twice, and the last stable offset must reach the high
// watermark. Its last line is
//
//	ledger: txn kills=K txns=N committed=C aborted=A unknown=U aborted_read=0 lost_commit=0 partial=0 duplicates=0 reordered=0 lso_stuck=0
//
// Exit status: 0 if the ledger checks out; 1 if an acknowledged id was lost,
// duplicated, reordered or found at another offset; 2 if the run itself could not
// finish (a cluster that did not settle, records the client gave up on, a read-back
// that stopped short).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type config struct {
	brokers              []string
	clusterDir           string
	clusterScript        string
	topic                string
	partitions           int
	replication          int
	kills                int
	rate                 float64
	down                 time.Duration
	settle               time.Duration
	warmup               time.Duration
	cooldown             time.Duration
	waitTimeout          time.Duration
	linger               time.Duration
	deliveryTimeout      time.Duration
	metadataMinAge       time.Duration
	clientLog            string
	fault                string
	faultScript          string
	hold                 time.Duration
	mixedSkew            bool
	mixedNet             bool
	mixedPower           bool
	mixedDisk            bool
	mixedBitflip         bool
	mixedStep            bool
	duration             time.Duration
	ackBound             time.Duration
	probeLog             string
	txn                  bool
	txnProducers         int
	txnRecordsMin        int
	txnRecordsMax        int
	txnAbort             float64
	txnTimeout           time.Duration
	txnKill              string
	lsoBound             time.Duration
	seed                 uint64
	queue                int
	queueRate            float64
	queueKeys            int
	queueKeyWrites       int
	queueHistory         string
	queueCheck           string
	queueReadUncommitted bool
	queueGroup           bool
}

// faultNames is every -fault mode and what its rounds are called in the summary.
var faultNames = map[string]string{
	"kill": "kills", "pause": "pauses", "partition": "partition rounds", "drop": "packet-loss rounds",
	"crash-all": "whole-cluster kills", "power": "power cuts", "skew": "clock-skew rounds", "mixed": "mixed rounds",
	"disk-full": "disk-full rounds", "bitflip": "bit-flip rounds", "cut": "cut-segment rounds", "step": "clock-step rounds",
	"bridge": "bridge rounds", "client-cut": "client-cut rounds",
}

// completed is how many of the kills (or partition rounds) finished without an error.
func completed(kills []kill) int {
	n := 0
	for _, k := range kills {
		if k.err == "" {
			n++
		}
	}
	return n
}

func parseFlags() config {
	var cfg config
	var brokers string
	flag.StringVar(&brokers, "brokers", "127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094", "Kafka addresses of nodes 1..n, in node order")
	flag.StringVar(&cfg.clusterDir, "cluster-dir", "", "directory of the cluster compat/cluster.sh started (required)")
	flag.StringVar(&cfg.clusterScript, "cluster-sh", "compat/cluster.sh", "path of compat/cluster.sh")
	flag.StringVar(&cfg.topic, "topic", fmt.Sprintf("ledger-%d", time.Now().Unix()), "topic to create and write")
	flag.IntVar(&cfg.partitions, "partitions", 3, "partitions of the topic")
	flag.IntVar(&cfg.replication, "replication-factor", 3, "replication factor of the topic")
	flag.IntVar(&cfg.kills, "kills", 20, "leader kills (with -fault partition or drop: rounds)")
	flag.Float64Var(&cfg.rate, "rate", 1000, "records per second offered")
	flag.DurationVar(&cfg.down, "down", 3*time.Second, "how long a killed leader stays down")
	flag.DurationVar(&cfg.settle, "settle", 2*time.Second, "pause after a restarted node is back, before the next kill")
	flag.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "production before the first kill")
	flag.DurationVar(&cfg.cooldown, "cooldown", 3*time.Second, "production after the last kill")
	flag.DurationVar(&cfg.waitTimeout, "wait-timeout", 30*time.Second, "bound of each wait for the cluster to agree on leaders")
	flag.DurationVar(&cfg.linger, "linger", 5*time.Millisecond, "producer linger")
	flag.DurationVar(&cfg.deliveryTimeout, "delivery-timeout", 30*time.Second, "producer delivery timeout (retries are unlimited within it)")
	flag.DurationVar(&cfg.metadataMinAge, "metadata-min-age", 250*time.Millisecond, "least time between the client's metadata refreshes (kgo default 5s)")
	flag.StringVar(&cfg.clientLog, "client-log", "", "file for the franz-go client log (info level); none if empty")
	flag.StringVar(&cfg.fault, "fault", "kill", "kill: kill -9 the leader, then restart it; pause: SIGSTOP it for -down, then SIGCONT; partition: cut it off from the other nodes with -fault-sh, then heal; drop: random loss of 5-20% of every node's packets with -fault-sh for -hold, then heal; crash-all: kill -9 every node at once, restart all after -down; power: as crash-all, each node's files cut back to what its fsyncs made durable, tails torn (nodes started with a power-loss file); skew: the leader restarted with its wall clock up to 10 min off (nodes under libfaketime: run.sh --skew); mixed: each round one of kill, pause, crash-all (and skew with -mixed-skew, partition (the leader cut off from its peers), bridge (the leader and one follower cut apart), client-cut (the leader cut off from the clients) and drop with -mixed-net, power with -mixed-power, disk-full with -mixed-disk, bitflip with -mixed-bitflip, step with -mixed-step), drawn with -seed; disk-full: the leader's own file system filled for -hold, then freed; bitflip: bits flipped in a stopped follower's segment, found, and the replica rebuilt from the leader; cut: a stopped follower's segment cut short, found (when below its last checkpoint) and rebuilt; step: the leader's wall clock stepped while it runs for -hold (disk.go)")
	flag.DurationVar(&cfg.duration, "duration", 0, "with -fault drop, crash-all, power, skew or mixed: start rounds until this much time has passed (then -kills is ignored)")
	flag.BoolVar(&cfg.mixedSkew, "mixed-skew", false, "with -fault mixed: draw clock-skew rounds too (the nodes run under libfaketime)")
	flag.BoolVar(&cfg.mixedPower, "mixed-power", false, "with -fault mixed: draw whole-cluster power cuts too (every node started with a power-loss file in its directory; see power.go)")
	flag.BoolVar(&cfg.mixedDisk, "mixed-disk", false, "with -fault mixed: draw disk-full rounds too (every node's data directory on a file system of its own: KEEL_NETNS_LOOP_MIB, compat/faults/netns-cluster.sh)")
	flag.BoolVar(&cfg.mixedBitflip, "mixed-bitflip", false, "with -fault mixed: draw bit-flip and cut rounds too (a stopped follower's segment damaged, found and rebuilt)")
	flag.BoolVar(&cfg.mixedStep, "mixed-step", false, "with -fault mixed: draw clock-step rounds too (the nodes run under libfaketime)")
	flag.BoolVar(&cfg.mixedNet, "mixed-net", false, "with -fault mixed: draw partition and packet-loss rounds too, with -fault-sh (the nodes run in network namespaces: -cluster-sh compat/faults/netns-cluster.sh)")
	flag.StringVar(&cfg.faultScript, "fault-sh", "compat/faults/netns.sh", "with -fault partition or drop (or mixed with -mixed-net): script run as `isolate NODE NODES`, `drop NODE PERCENT` and `heal NODE`")
	flag.DurationVar(&cfg.hold, "hold", 4*time.Second, "with -fault partition, drop or mixed: how long a partition or a round of packet loss lasts")
	flag.DurationVar(&cfg.ackBound, "ack-bound", 1500*time.Millisecond,
		"with -fault partition: the longest an isolated leader may acknowledge after the cut (election timeout, at most 1 s, plus a margin)")
	flag.StringVar(&cfg.probeLog, "probe-log", "", "with -fault partition: file for every probe's answer (tab-separated); none if empty")
	flag.BoolVar(&cfg.txn, "txn", false, "the transactional ledger: transactional producers, kills of partition 0's leader and of the transaction coordinators, read_committed checks (see txn.go)")
	flag.IntVar(&cfg.txnProducers, "txn-producers", 2, "with -txn: transactional producers, each with its own transactional id, writing concurrently")
	flag.IntVar(&cfg.txnRecordsMin, "txn-records-min", 3, "with -txn: fewest records in a transaction")
	flag.IntVar(&cfg.txnRecordsMax, "txn-records-max", 10, "with -txn: most records in a transaction")
	flag.Float64Var(&cfg.txnAbort, "txn-abort", 0.25, "with -txn or -queue: fraction of transactions aborted on purpose")
	flag.DurationVar(&cfg.txnTimeout, "txn-timeout", 10*time.Second, "with -txn or -queue: the producers' transaction timeout (and record delivery timeout)")
	flag.StringVar(&cfg.txnKill, "txn-kill", "alternate", "with -txn: whose node each kill takes down: alternate (partition 0's leader, then a transaction coordinator, ...), leader, coordinator")
	flag.IntVar(&cfg.queue, "queue", 0, "beside the ledger, the queue workload (queue.go) with this many transactional workers: sends and polls over rotating keys, a Jepsen-style history checked by -queue-check")
	flag.Float64Var(&cfg.queueRate, "queue-rate", 60, "with -queue: transactions per second, all workers together")
	flag.IntVar(&cfg.queueKeys, "queue-keys", 4, "with -queue: keys (single-partition topics) written at a time")
	flag.IntVar(&cfg.queueKeyWrites, "queue-key-writes", 200, "with -queue: values a key takes before a new key replaces it")
	flag.StringVar(&cfg.queueHistory, "queue-history", "", "with -queue: the history file (default queue.jsonl in -cluster-dir)")
	flag.BoolVar(&cfg.queueReadUncommitted, "queue-read-uncommitted", false, "with -queue: the workers poll read_uncommitted, a check of the checker (it must report the aborted sends they see)")
	flag.BoolVar(&cfg.queueGroup, "queue-group", false, "with -queue: the workers consume as one consumer group, each transaction sending the offsets of its polls to the transaction (exactly-once consume-and-produce), where by default each follows every key from offset 0 on its own")
	flag.StringVar(&cfg.queueCheck, "queue-check", "", "with -queue: the checker run on the history (target/release/keel-queue-check); none if empty")
	flag.DurationVar(&cfg.lsoBound, "lso-bound", 30*time.Second, "with -txn or -queue: longest the last stable offset may stay below the high watermark after the last transaction ended")
	flag.Uint64Var(&cfg.seed, "seed", uint64(time.Now().UnixNano()), "with -txn: seed of the transactions' sizes and of which are aborted; with -fault drop or skew: of the loss rates or clock offsets")
	flag.Parse()
	cfg.brokers = strings.Split(brokers, ",")
	if cfg.queueHistory == "" {
		cfg.queueHistory = filepath.Join(cfg.clusterDir, "queue.jsonl")
	}
	if cfg.clusterDir == "" || cfg.kills < 0 || cfg.rate <= 0 || cfg.partitions < 1 || faultNames[cfg.fault] == "" {
		flag.Usage()
		os.Exit(2)
	}
	if cfg.txn && (cfg.fault != "kill" || cfg.txnProducers < 1 || cfg.txnRecordsMin < 1 || cfg.txnRecordsMax < cfg.txnRecordsMin ||
		cfg.txnAbort < 0 || cfg.txnAbort > 1 || (cfg.txnKill != "alternate" && cfg.txnKill != "leader" && cfg.txnKill != "coordinator")) {
		fmt.Fprintln(os.Stderr, "ledger: -txn needs -fault kill, -txn-producers >= 1, 1 <= -txn-records-min <= -txn-records-max, 0 <= -txn-abort <= 1, -txn-kill alternate|leader|coordinator")
		os.Exit(2)
	}
	if cfg.queue < 0 || (cfg.queue > 0 && (cfg.txn || cfg.queueRate <= 0 || cfg.queueKeys < 1 || cfg.queueKeyWrites < 1 || (cfg.queueGroup && cfg.queueReadUncommitted))) {
		fmt.Fprintln(os.Stderr, "ledger: -queue needs no -txn, -queue-rate > 0, -queue-keys >= 1, -queue-key-writes >= 1, and not both -queue-group and -queue-read-uncommitted")
		os.Exit(2)
	}
	return cfg
}

func main() {
	cfg := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
	}
	os.Exit(code)
}

func run(ctx context.Context, cfg config) (int, error) {
	if cfg.txn {
		return runTxn(ctx, cfg)
	}
	var q *queueRun
	code, err := runLedger(ctx, cfg, &q)
	if q != nil && err == nil {
		// 1 (a violation) outranks 2 (could not finish), which outranks 0.
		switch {
		case code == 1 || q.code == 1:
			code = 1
		case code == 2 || q.code == 2:
			code = 2
		}
	}
	return code, err
}

// runLedger is the ledger's run; with -queue it starts the queue workload in *q,
// stops it with the producer and checks its history before the ledger's report.
func runLedger(ctx context.Context, cfg config, q **queueRun) (int, error) {
	c, err := newCluster(cfg.clusterScript, cfg.clusterDir, cfg.brokers, cfg.topic, cfg.partitions)
	if err != nil {
		return 2, err
	}
	defer c.close()
	c.faultScript = cfg.faultScript
	partitionMode := cfg.fault == "partition"
	// Rounds of clusterRounds (rounds.go): faults that are not aimed at one leader kill.
	roundsMode := cfg.fault == "drop" || cfg.fault == "crash-all" || cfg.fault == "power" || cfg.fault == "skew" || cfg.fault == "mixed" ||
		cfg.fault == "disk-full" || cfg.fault == "bitflip" || cfg.fault == "cut" || cfg.fault == "step" || cfg.fault == "bridge" || cfg.fault == "client-cut"
	l := &ledger{}
	opts := producerOptions(cfg.brokers, cfg, l)
	if cfg.clientLog != "" {
		f, err := os.Create(cfg.clientLog)
		if err != nil {
			return 2, err
		}
		defer f.Close()
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(f, kgo.LogLevelInfo, func() string { return time.Now().Format(timeFormat) + " " })))
	}
	producer, err := kgo.NewClient(opts...)
	if err != nil {
		return 2, err
	}
	defer producer.Close()

	if err := createTopic(ctx, producer, cfg.topic, cfg.partitions, cfg.replication); err != nil {
		return 2, err
	}
	if _, err := c.waitAgreed(ctx, c.nodes(), -1, cfg.waitTimeout); err != nil {
		return 2, fmt.Errorf("topic %s has no agreed leaders: %w\n%s", cfg.topic, err, c.logTails(30))
	}
	if cfg.queue > 0 {
		if *q, err = startQueue(ctx, cfg, producer); err != nil {
			return 2, fmt.Errorf("queue: %w", err)
		}
	}
	faults := faultNames[cfg.fault]
	if cfg.fault == "mixed" {
		faults = fmt.Sprintf("rounds drawn from %v", mixedClasses(cfg))
	}
	count := fmt.Sprint(cfg.kills)
	if cfg.duration > 0 {
		count = "for " + cfg.duration.String() + ","
	}
	fmt.Fprintf(os.Stderr, "ledger: topic %s, %d partitions, rf %d; producing %.0f records/s; %s %s\n",
		cfg.topic, cfg.partitions, cfg.replication, cfg.rate, count, faults)

	produceCtx, stopProducing := context.WithCancel(ctx)
	producedCh := make(chan int64, 1)
	go func() { producedCh <- produce(produceCtx, producer, cfg.topic, cfg.partitions, cfg.rate, l) }()

	var killErr error
	var kills []kill
	var rounds []round
	var whole []faultRound
	var claims map[claim]time.Time
	if killErr = sleep(ctx, cfg.warmup); killErr == nil {
		if partitionMode {
			rounds, claims, killErr = partitionLeaders(ctx, c, cfg, os.Stderr)
		} else if roundsMode {
			whole, killErr = clusterRounds(ctx, c, cfg, os.Stderr)
		} else {
			kills, killErr = killLeaders(ctx, c, cfg, os.Stderr)
		}
	}
	if killErr != nil {
		fmt.Fprintf(os.Stderr, "ledger: kills stopped: %v\nnode log tails:\n%s", killErr, c.logTails(40))
	} else {
		_ = sleep(ctx, cfg.cooldown)
	}
	stopProducing()
	if *q != nil {
		(*q).halt()
	}
	produced := <-producedCh
	stoppedAt := time.Now()
	flushCtx, cancel := context.WithTimeout(context.Background(), cfg.deliveryTimeout+15*time.Second)
	flushErr := producer.Flush(flushCtx)
	cancel()
	if !partitionMode {
		restartDead(ctx, c)
	}
	if *q != nil {
		(*q).finish(ctx, stoppedAt)
	}

	acks, failures, dataLoss := l.snapshot()
	for i := range kills {
		kills[i].windowEnd = stoppedAt
		if i+1 < len(kills) {
			kills[i].windowEnd = kills[i+1].at
		}
	}
	if partitionMode {
		kills = roundsAsKills(rounds, stoppedAt)
	}

	ends, err := endOffsets(context.Background(), producer, cfg.topic, cfg.partitions)
	if err != nil {
		return 2, fmt.Errorf("%w\n%s", err, c.logTails(40))
	}
	logs, fetchErrors, readErr := readBack(context.Background(), cfg.brokers, cfg.topic, ends)
	v := check(acks, logs, cfg.partitions)
	measure(kills, acks, newEpochIndex(logs))
	printEpochs(os.Stdout, logs)

	if partitionMode {
		printRounds(os.Stdout, rounds, kills, cfg.ackBound)
		if cfg.probeLog != "" {
			if err := writeProbeLog(cfg.probeLog, rounds); err != nil {
				fmt.Fprintf(os.Stderr, "ledger: probe log: %v\n", err)
			}
		}
		pv := judgePartitions(rounds, logs, claims, cfg.ackBound)
		counts, diff, divergent := c.replicasIdentical(ctx)
		reportPartitions(os.Stdout, pv, cfg.ackBound, counts, diff)
		problems := report("rounds", completed(kills), kills, v, produced, failures, dataLoss, fetchErrors, flushErr, readErr, killErr, ends)
		switch {
		case v.failed() || pv.failed() || divergent:
			return 1, nil
		case problems || diff != "" || len(pv.notCaughtUp) > 0:
			return 2, nil
		}
		return 0, nil
	}
	if roundsMode {
		measureRounds(whole, acks, stoppedAt)
		slow := printClusterRounds(os.Stdout, cfg.fault, whole)
		// Every replica's segment files hold the same batches (base offset, epoch, CRC).
		counts, diff, divergent := c.replicasIdentical(ctx)
		if diff != "" {
			fmt.Fprintf(os.Stdout, "replicas differ at the end: %s\n", diff)
		}
		fmt.Fprintf(os.Stdout, "replicas: identical=%t batches_per_partition=%v\n", diff == "", counts)
		problems := report(cfg.fault+"_rounds", len(whole), nil, v, produced, failures, dataLoss, fetchErrors, flushErr, readErr, killErr, ends)
		switch {
		case v.failed() || slow || divergent:
			return 1, nil
		case problems || diff != "":
			return 2, nil
		}
		return 0, nil
	}
	printKills(os.Stdout, kills)
	problems := report("kills", completed(kills), kills, v, produced, failures, dataLoss, fetchErrors, flushErr, readErr, killErr, ends)
	switch {
	case v.failed():
		return 1, nil
	case problems:
		return 2, nil
	}
	return 0, nil
}

// restartDead restarts any node whose process is gone, so the read-back sees the
// whole cluster after a run that stopped in the middle of a kill.
func restartDead(ctx context.Context, c *cluster) {
	for _, id := range c.nodes() {
		if !c.running(id) {
			if err := c.restart(ctx, id); err != nil {
				fmt.Fprintf(os.Stderr, "ledger: restarting node %d: %v\n", id, err)
			}
		}
	}
}

// report prints the findings and the summary line; it returns whether the run had
// problems other than the ledger's verdict.
func report(faults string, count int, kills []kill, v verdict, produced int64, failures []failure, dataLoss, fetchErrors []string,
	flushErr, readErr, killErr error, ends map[int32]int64) bool {
	problems := killErr != nil || flushErr != nil || readErr != nil || len(failures) > 0 || len(dataLoss) > 0
	out := os.Stdout
	if len(failures) > 0 {
		fmt.Fprintf(out, "records the client gave up on: %d, first: id %d p%d at %s: %v\n",
			len(failures), failures[0].id, failures[0].partition, failures[0].at.Format(timeFormat), failures[0].err)
	}
	if unresolved := produced - int64(v.acked) - int64(len(failures)); unresolved != 0 {
		problems = true
		fmt.Fprintf(out, "records neither acknowledged nor failed after the flush: %d (flush: %v)\n", unresolved, flushErr)
	}
	for _, d := range dataLoss {
		fmt.Fprintf(out, "franz-go detected data loss (OUT_OF_ORDER_SEQUENCE_NUMBER on a fresh sequence): %s\n", d)
	}
	if len(fetchErrors) > 0 {
		fmt.Fprintf(out, "read-back fetch errors (retried): %s\n", sample(fetchErrors, 5))
	}
	if readErr != nil {
		fmt.Fprintf(out, "read-back: %v\n", readErr)
	}
	if killErr != nil {
		fmt.Fprintf(out, "kills stopped early: %v\n", killErr)
	}
	if len(v.lost) > 0 {
		fmt.Fprintf(out, "LOST acknowledged ids: %s\n", sample(v.lost, 20))
	}
	if len(v.duplicates) > 0 {
		fmt.Fprintf(out, "DUPLICATE ids: %s\n", sample(v.duplicates, 20))
	}
	if len(v.reordered) > 0 {
		fmt.Fprintf(out, "REORDERED: %s\n", sample(v.reordered, 10))
	}
	if len(v.offsetMismatch) > 0 {
		fmt.Fprintf(out, "OFFSET MISMATCH: %s\n", sample(v.offsetMismatch, 10))
	}
	if len(v.foreign) > 0 {
		fmt.Fprintf(out, "FOREIGN records: %s\n", sample(v.foreign, 10))
	}
	var gaps, anyGaps, failovers, elections []time.Duration
	for _, k := range kills {
		if k.err != "" {
			continue
		}
		gaps = append(gaps, k.gap)
		anyGaps = append(anyGaps, k.anyGap)
		elections = append(elections, k.electedIn)
		if !k.noFailover {
			failovers = append(failovers, k.failover)
		}
	}
	gapMed, gapMax := stats(gaps)
	anyMed, anyMax := stats(anyGaps)
	foMed, foMax := stats(failovers)
	elMed, elMax := stats(elections)
	fmt.Fprintf(out, "ledger: produced=%d failed=%d logged=%d unacked_present=%d offset_mismatch=%d foreign=%d end_offsets=%v\n",
		produced, len(failures), v.logged, v.unackedPresent, len(v.offsetMismatch), len(v.foreign), ends)
	fmt.Fprintf(out, "ledger: failover_ms median=%s max=%s elected_ms median=%s max=%s any_partition_gap_ms median=%s max=%s\n",
		foMed, foMax, elMed, elMax, anyMed, anyMax)
	fmt.Fprintf(out, "ledger: %s=%d acked=%d lost=%d duplicates=%d reordered=%d gap_ms median=%s max=%s\n",
		faults, count, v.acked, len(v.lost), len(v.duplicates), len(v.reordered), gapMed, gapMax)
	return problems
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const transactionTopic = "__transaction_state"

// runTxn is the -txn mode: see txn.go. Exit status as run's: 0 clean, 1 a check
// failed, 2 the run could not finish or proved nothing.
func runTxn(ctx context.Context, cfg config) (int, error) {
	c, err := newCluster(cfg.clusterScript, cfg.clusterDir, cfg.brokers, cfg.topic, cfg.partitions)
	if err != nil {
		return 2, err
	}
	defer c.close()
	admin, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...), kgo.DialTimeout(2*time.Second), kgo.MetadataMinAge(cfg.metadataMinAge))
	if err != nil {
		return 2, err
	}
	defer admin.Close()
	if err := createTopic(ctx, admin, cfg.topic, cfg.partitions, cfg.replication); err != nil {
		return 2, err
	}
	if _, err := c.waitAgreed(ctx, c.nodes(), -1, cfg.waitTimeout); err != nil {
		return 2, fmt.Errorf("topic %s has no agreed leaders: %w\n%s", cfg.topic, err, c.logTails(30))
	}
	var clientLog *quietLogger
	if cfg.clientLog != "" {
		f, err := os.Create(cfg.clientLog)
		if err != nil {
			return 2, err
		}
		defer f.Close()
		clientLog = newQuietLogger(f)
		defer clientLog.flush()
	}
	fmt.Fprintf(os.Stderr, "ledger: txn topic %s, %d partitions, rf %d; %d transactional producers, %d-%d records a transaction, %.0f%% aborted on purpose, timeout %v, seed %d; %d kills (%s)\n",
		cfg.topic, cfg.partitions, cfg.replication, cfg.txnProducers, cfg.txnRecordsMin, cfg.txnRecordsMax,
		cfg.txnAbort*100, cfg.txnTimeout, cfg.seed, cfg.kills, cfg.txnKill)

	book := &txnBook{}
	var nextTxn atomic.Int64
	var ids []string
	produceCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	var wg sync.WaitGroup
	for j := range cfg.txnProducers {
		p := &txnProducer{
			index: j, id: fmt.Sprintf("%s-txn-%d", cfg.topic, j), cfg: cfg, topic: cfg.topic,
			rng: rand.New(rand.NewPCG(cfg.seed, uint64(j))), book: book, nextTxn: &nextTxn,
		}
		p.log = clientLog
		ids = append(ids, p.id)
		wg.Add(1)
		go func() { defer wg.Done(); p.run(produceCtx) }()
	}

	var kills []kill
	killErr := sleep(ctx, cfg.warmup)
	if killErr == nil {
		c.coordinators, killErr = coordinatorPartitions(ctx, c, admin, ids, cfg.waitTimeout)
	}
	if killErr == nil {
		kills, killErr = killLeaders(ctx, c, cfg, os.Stderr)
	}
	if killErr != nil {
		fmt.Fprintf(os.Stderr, "ledger: kills stopped: %v\nnode log tails:\n%s", killErr, c.logTails(40))
	} else {
		_ = sleep(ctx, cfg.cooldown)
	}
	stopProducing()
	wg.Wait()
	lastEnd := time.Now()
	restartDead(ctx, c)
	txns, problems, dataLoss, clients := book.snapshot()
	for i := range kills {
		kills[i].windowEnd = lastEnd
		if i+1 < len(kills) {
			kills[i].windowEnd = kills[i+1].at
		}
	}

	stable, err := waitStable(ctx, admin, cfg.topic, cfg.partitions, lastEnd.Add(cfg.lsoBound))
	if err != nil {
		return 2, fmt.Errorf("%w\n%s", err, c.logTails(40))
	}
	rcEnds := stable.lso
	committed, rcErrs, rcErr := readTxnLog(context.Background(), cfg.brokers, cfg.topic, rcEnds, kgo.ReadCommitted())
	uncommitted, ruErrs, ruErr := readTxnLog(context.Background(), cfg.brokers, cfg.topic, stable.hw, kgo.ReadUncommitted())
	v := checkTxns(txns, committed, uncommitted, rcEnds, cfg.partitions)
	v.lsoStuck = stable.stuck

	printTxnKills(os.Stdout, kills, txns)
	r := txnRun{
		kills: kills, txns: txns, problems: problems, dataLoss: dataLoss, clients: clients,
		fetchErrors: append(rcErrs, ruErrs...), readErrs: []error{rcErr, ruErr}, killErr: killErr, stable: stable,
		lastEnd: lastEnd,
	}
	incomplete := reportTxns(os.Stdout, r, v)
	switch {
	case v.failed():
		return 1, nil
	case incomplete:
		return 2, nil
	}
	return 0, nil
}

// javaHashCode is Java's String.hashCode: over UTF-16 code units, wrapping.
func javaHashCode(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}

// coordinatorPartition is the __transaction_state partition of a transactional id,
// Kafka's Utils.abs(id.hashCode()) % partitions (abs(MinInt32) is 0).
func coordinatorPartition(id string, partitions int32) int32 {
	h := javaHashCode(id)
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % partitions
}

// coordinatorPartitions waits until __transaction_state exists with a leader for
// the partition of every transactional id, and returns those partitions. It checks
// the placement against FindCoordinator (key type 1) and says so if they disagree.
func coordinatorPartitions(ctx context.Context, c *cluster, admin *kgo.Client, ids []string, timeout time.Duration) ([]int32, error) {
	deadline := time.Now().Add(timeout)
	for {
		parts, leaders, err := txnTopicLeaders(ctx, c, ids)
		if err == nil {
			for i, id := range ids {
				if node, err := findTxnCoordinator(ctx, admin, id); err != nil || node != leaders[i] {
					fmt.Fprintf(os.Stderr, "ledger: transactional id %s: %s partition %d is led by node %d, FindCoordinator says node %d (%v)\n",
						id, transactionTopic, parts[i], leaders[i], node, err)
				}
			}
			fmt.Fprintf(os.Stderr, "ledger: transactional ids %v: %s partitions %v, coordinators %v\n", ids, transactionTopic, parts, leaders)
			return parts, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the transaction coordinators: after %v: %w", timeout, err)
		}
		if err := sleep(ctx, probeInterval); err != nil {
			return nil, err
		}
	}
}

// txnTopicLeaders is, as the first node that answers sees __transaction_state, the partition of each id
// and its leader.
func txnTopicLeaders(ctx context.Context, c *cluster, ids []string) ([]int32, []int32, error) {
	var m *kmsg.MetadataResponse
	var err error
	for _, node := range c.nodes() {
		if m, err = c.metadataOf(ctx, node, transactionTopic); err == nil {
			break
		}
	}
	if err != nil {
		return nil, nil, err
	}
	t := c.topicOf(m, transactionTopic)
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", transactionTopic, err)
	}
	if len(t.Partitions) == 0 {
		return nil, nil, fmt.Errorf("%s has no partitions", transactionTopic)
	}
	var parts, leaders []int32
	for _, id := range ids {
		p := coordinatorPartition(id, int32(len(t.Partitions)))
		leader := int32(-1)
		for _, mp := range t.Partitions {
			if mp.Partition == p {
				leader = mp.Leader
			}
		}
		if leader < 0 {
			return nil, nil, fmt.Errorf("%s partition %d has no leader", transactionTopic, p)
		}
		parts, leaders = append(parts, p), append(leaders, leader)
	}
	return parts, leaders, nil
}

// findTxnCoordinator is the node FindCoordinator names for a transactional id.
func findTxnCoordinator(ctx context.Context, admin *kgo.Client, id string) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 1
	req.CoordinatorKey = id
	req.CoordinatorKeys = []string{id}
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		return -1, err
	}
	if len(resp.Coordinators) == 1 {
		co := resp.Coordinators[0]
		return co.NodeID, kerr.ErrorForCode(co.ErrorCode)
	}
	return resp.NodeID, kerr.ErrorForCode(resp.ErrorCode)
}

// stableOffsets is where the partitions ended: the high watermarks and the last
// stable offsets, and how many partitions' LSO stayed below the high watermark.
type stableOffsets struct {
	hw, lso map[int32]int64
	stuck   int
	at      time.Time // when LSO first equalled the high watermark everywhere
}

// waitStable polls ListOffsets, read_committed (the LSO) and read_uncommitted (the
// high watermark), until the LSO reaches the high watermark on every partition or
// the deadline passes; then the partitions still short are stuck. It polls at
// least once.
func waitStable(ctx context.Context, cl *kgo.Client, topic string, parts int, deadline time.Time) (stableOffsets, error) {
	all, err := waitStableTopics(ctx, cl, map[string]int{topic: parts}, deadline)
	return all[topic], err
}

// waitStableTopics is waitStable over several topics (partitions 0..n-1 of each,
// n = want[topic]).
func waitStableTopics(ctx context.Context, cl *kgo.Client, want map[string]int, deadline time.Time) (map[string]stableOffsets, error) {
	for {
		lso, err := listEnds(ctx, cl, want, 1)
		if err != nil {
			return nil, err
		}
		hw, err := listEnds(ctx, cl, want, 0)
		if err != nil {
			return nil, err
		}
		all := map[string]stableOffsets{}
		stuck := 0
		for topic := range want {
			s := stableOffsets{hw: hw[topic], lso: lso[topic], at: time.Now()}
			for p, end := range s.hw {
				if s.lso[p] < end {
					s.stuck++
				}
			}
			all[topic] = s
			stuck += s.stuck
		}
		if stuck == 0 || time.Now().After(deadline) {
			return all, nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return all, err
		}
	}
}

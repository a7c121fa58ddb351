package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// finalProcess is the history's process number of the read-back at the end.
const finalProcess = 1_000_000

// queueRun is the queue workload of one ledger run.
type queueRun struct {
	cfg     config
	admin   *kgo.Client
	pool    *keyPool
	hist    *history
	stats   queueStats
	stop    context.CancelFunc
	wg      sync.WaitGroup
	created sync.WaitGroup
	code    int // the checker's verdict: 0 clean, 1 an anomaly, 2 could not check
}

// startQueue creates the first keys and starts the workers and the key creator.
func startQueue(ctx context.Context, cfg config, admin *kgo.Client) (*queueRun, error) {
	q := &queueRun{cfg: cfg, admin: admin, pool: &keyPool{
		base: cfg.topic, writes: map[int]int{}, retiredAt: map[int]time.Time{}, maxWrites: cfg.queueKeyWrites,
	}}
	for key := range cfg.queueKeys + queueSpare {
		if err := createTopic(ctx, admin, q.pool.topic(key), 1, cfg.replication); err != nil {
			return nil, err
		}
		q.pool.add(key, key < cfg.queueKeys)
	}
	var err error
	if q.hist, err = newHistory(cfg.queueHistory); err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	q.stop = stop
	var values atomic.Int64
	for i := range cfg.queue {
		w := &queueWorker{index: i, workers: cfg.queue, cfg: cfg, pool: q.pool, hist: q.hist, stats: &q.stats,
			values: &values, rng: rand.New(rand.NewPCG(cfg.seed, uint64(1000+i)))}
		q.wg.Add(1)
		go func() { defer q.wg.Done(); w.run(wctx, cfg.queueRate/float64(cfg.queue)) }()
	}
	q.created.Add(1)
	go func() { defer q.created.Done(); q.createKeys(wctx, cfg.queueKeys+queueSpare) }()
	fmt.Fprintf(os.Stderr, "ledger: queue: %d transactional workers, %.0f transactions/s, %d keys of %d values at a time (topics %s-q*), history %s\n",
		cfg.queue, cfg.queueRate, cfg.queueKeys, cfg.queueKeyWrites, cfg.topic, cfg.queueHistory)
	return q, nil
}

// createKeys keeps queueSpare keys created ahead of need; a creation that fails
// (the controller down) is tried again.
func (q *queueRun) createKeys(ctx context.Context, next int) {
	for ctx.Err() == nil {
		if q.pool.readyCount() >= queueSpare {
			_ = sleep(ctx, 50*time.Millisecond)
			continue
		}
		if err := createTopic(ctx, q.admin, q.pool.topic(next), 1, q.cfg.replication); err != nil {
			_ = sleep(ctx, time.Second)
			continue
		}
		q.pool.add(next, false)
		next++
	}
}

// halt stops the workers once each has finished its transaction.
func (q *queueRun) halt() {
	q.stop()
	q.wg.Wait()
	q.created.Wait()
}

// finish waits for every key's last stable offset to reach its high watermark,
// reads every key back under read_committed as the history's last transaction,
// and runs the checker on the history. It sets q.code.
func (q *queueRun) finish(ctx context.Context, lastEnd time.Time) {
	q.code = 2
	keys := q.pool.all()
	want := map[string]int{}
	for _, key := range keys {
		want[q.pool.topic(key)] = 1
	}
	stable, err := waitStableTopics(ctx, q.admin, want, lastEnd.Add(q.cfg.lsoBound))
	if err != nil {
		fmt.Fprintf(os.Stderr, "ledger: queue: end offsets: %v\n", err)
		_ = q.hist.close()
		return
	}
	ends := map[string]int64{}
	stuck := 0
	for topic, s := range stable {
		ends[topic] = s.lso[0]
		stuck += s.stuck
	}
	final, err := readKeys(ctx, q.cfg.brokers, q.pool, ends)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ledger: queue: read-back: %v\n", err)
		_ = q.hist.close()
		return
	}
	read := map[string][][2]int64{}
	for key, recs := range final {
		read[strconv.Itoa(key)] = recs
	}
	value := []any{[]any{"poll", read}}
	q.hist.write("invoke", finalProcess, []any{[]any{"poll"}}, "")
	q.hist.write("ok", finalProcess, value, "")
	if err := q.hist.close(); err != nil {
		fmt.Fprintf(os.Stderr, "ledger: queue: history: %v\n", err)
		return
	}
	fmt.Printf("queue: transactions ok=%d fail=%d info=%d sends=%d records_polled=%d clients=%d keys=%d lso_stuck=%d\n",
		q.stats.ok.Load(), q.stats.fail.Load(), q.stats.info.Load(), q.stats.sends.Load(), q.stats.polled.Load(),
		q.stats.clients.Load(), len(keys), stuck)
	if q.cfg.queueCheck == "" {
		fmt.Println("queue: no checker given (-queue-check): history not checked")
		return
	}
	args := []string{q.cfg.queueHistory}
	if q.cfg.queueGroup {
		args = append(args, "--group")
	}
	cmd := exec.Command(q.cfg.queueCheck, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err = cmd.Run()
	switch code := cmd.ProcessState.ExitCode(); {
	case err == nil:
		q.code = 0
	case code == 1:
		q.code = 1
	default:
		fmt.Fprintf(os.Stderr, "ledger: queue: %s: %v\n", q.cfg.queueCheck, err)
	}
	if stuck > 0 && q.code == 0 {
		q.code = 1
	}
}

// readKeys reads every key from offset 0 to ends[topic] under read_committed. It
// keeps control records only to know where a key's log ends.
func readKeys(ctx context.Context, seeds []string, pool *keyPool, ends map[string]int64) (map[int][][2]int64, error) {
	assign := map[string]map[int32]kgo.Offset{}
	for topic, end := range ends {
		if end > 0 {
			assign[topic] = map[int32]kgo.Offset{0: kgo.NewOffset().At(0)}
		}
	}
	out := map[int][][2]int64{}
	if len(assign) == 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(assign),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	next := map[string]int64{}
	remaining := len(assign)
	ctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stopped after %v with %d keys short", readBackTimeout, remaining)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end := ends[r.Topic]
			if r.Offset >= end || next[r.Topic] >= end {
				return
			}
			next[r.Topic] = r.Offset + 1
			if next[r.Topic] >= end {
				remaining--
			}
			if r.Attrs.IsControl() {
				return
			}
			key, _ := keyOf(pool.base, r.Topic)
			v, err := strconv.ParseInt(string(r.Value), 10, 64)
			if err != nil {
				v = -1
			}
			out[key] = append(out[key], [2]int64{r.Offset, v})
		})
	}
	for _, recs := range out {
		sort.Slice(recs, func(i, j int) bool { return recs[i][0] < recs[j][0] })
	}
	return out, nil
}

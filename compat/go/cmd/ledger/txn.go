package main

// The transactional ledger (-txn): transactional franz-go producers write
// transactions of several records over every partition, commit most and abort some
// on purpose, while the harness kill -9s partition 0's leader and the producers'
// transaction coordinators in turn. At the end read_committed and read_uncommitted
// consumers read every partition back, and checkTxns judges what they saw against
// what each EndTransaction answered.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// outcome is what the client was told about a transaction.
type outcome int

const (
	outcomeUnknown   outcome = iota // an error before an answer: commit, abort or neither
	outcomeCommitted                // EndTransaction(TryCommit) returned nil
	outcomeAborted                  // EndTransaction(TryAbort) returned nil, no commit was ever sent
)

func (o outcome) String() string {
	return [...]string{"unknown", "committed", "aborted"}[o]
}

// txnWrite is one record of a transaction: record i went to partition; offset is
// where the broker acknowledged it, -1 if it did not.
type txnWrite struct {
	partition int32
	offset    int64
	err       error
}

// txn is one transaction as the producer ran it.
type txn struct {
	id         int64
	producer   int // index of the transactional id
	client     int // which of that producer's clients (a fenced client is replaced)
	wantAbort  bool
	writes     []txnWrite // record i is writes[i]
	begun      time.Time
	ended      time.Time
	commitSent bool // EndTransaction(TryCommit) may have reached the coordinator
	result     outcome
	err        string // the first error, if any
}

// neverCommitted is whether the client never asked for a commit: then no record of
// the transaction may ever be visible to read_committed.
func (t *txn) neverCommitted() bool { return !t.commitSent }

// txnBook is every transaction of the run, as the producers finished them.
type txnBook struct {
	mu       sync.Mutex
	txns     []*txn
	problems []string // client errors outside a transaction (a client that would not start or begin)
	dataLoss []string
	clients  int
}

func (b *txnBook) add(t *txn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.txns = append(b.txns, t)
}

func (b *txnBook) problem(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf(time.Now().Format(timeFormat)+" "+format, args...))
}

func (b *txnBook) snapshot() ([]*txn, []string, []string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*txn(nil), b.txns...), append([]string(nil), b.problems...), append([]string(nil), b.dataLoss...), b.clients
}

// txnProducer is one transactional id and the client that currently holds it.
type txnProducer struct {
	index   int
	id      string // the transactional id
	cfg     config
	topic   string
	rng     *rand.Rand
	book    *txnBook
	nextTxn *atomic.Int64 // transaction ids, shared by all producers
	log     *quietLogger  // the client log, nil for none
	cl      *kgo.Client
	client  int
}

// txnOpTimeout bounds each produce, flush, commit or abort: long enough for an
// election and a coordinator move, short enough that a hung call is noticed.
const txnOpTimeout = 30 * time.Second

// newClient starts a client with the producer's transactional id; its first
// transaction runs InitProducerId, which fences the client before it.
func (p *txnProducer) newClient() error {
	p.client++
	opts := []kgo.Opt{
		kgo.SeedBrokers(p.cfg.brokers...),
		kgo.TransactionalID(p.id),
		kgo.TransactionTimeout(p.cfg.txnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(p.cfg.txnTimeout),
		kgo.MetadataMinAge(p.cfg.metadataMinAge),
		kgo.DialTimeout(2 * time.Second),
		kgo.ProducerOnDataLossDetected(func(topic string, partition int32) {
			p.book.mu.Lock()
			defer p.book.mu.Unlock()
			p.book.dataLoss = append(p.book.dataLoss, fmt.Sprintf("%s-%d at %s (producer %d)", topic, partition, time.Now().Format(timeFormat), p.index))
		}),
	}
	if p.log != nil {
		opts = append(opts, kgo.WithLogger(prefixed{p.log, fmt.Sprintf("[producer %d client %d] ", p.index, p.client)}))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	p.cl = cl
	p.book.mu.Lock()
	p.book.clients++
	p.book.mu.Unlock()
	return nil
}

// drop closes the client, so the next transaction starts a new one with the same
// transactional id: what an application does when its producer is fenced or fails.
func (p *txnProducer) drop() {
	if p.cl != nil {
		p.cl.Close()
		p.cl = nil
	}
}

// run writes transactions one after another until ctx ends; the transaction under
// way when it ends is finished.
func (p *txnProducer) run(ctx context.Context) {
	defer p.drop()
	for ctx.Err() == nil {
		if p.cl == nil {
			if err := p.newClient(); err != nil {
				p.book.problem("producer %d: new client: %v", p.index, err)
				_ = sleep(ctx, time.Second)
				continue
			}
		}
		if err := p.cl.BeginTransaction(); err != nil {
			p.book.problem("producer %d client %d: begin: %v", p.index, p.client, err)
			p.drop()
			_ = sleep(ctx, 100*time.Millisecond)
			continue
		}
		t := p.plan()
		p.write(t)
		p.end(t)
		t.ended = time.Now()
		p.book.add(t)
	}
}

// plan draws the next transaction: its size, its partitions (record i of
// transaction n goes to partition (n + i) mod partitions, so every transaction of
// three records or more spans them all) and whether it is to be aborted.
func (p *txnProducer) plan() *txn {
	t := &txn{id: p.nextTxn.Add(1) - 1, producer: p.index, client: p.client, begun: time.Now()}
	size := p.cfg.txnRecordsMin + p.rng.IntN(p.cfg.txnRecordsMax-p.cfg.txnRecordsMin+1)
	t.wantAbort = p.rng.Float64() < p.cfg.txnAbort
	for i := range size {
		t.writes = append(t.writes, txnWrite{partition: int32((t.id + int64(i)) % int64(p.cfg.partitions)), offset: -1})
	}
	return t
}

// txnValue is the value of record i of transaction id.
func txnValue(id int64, i int) []byte { return fmt.Appendf(nil, "%d:%d", id, i) }

// write produces the transaction's records and waits for every answer.
func (p *txnProducer) write(t *txn) {
	recs := make([]*kgo.Record, len(t.writes))
	index := map[*kgo.Record]int{}
	for i, w := range t.writes {
		recs[i] = &kgo.Record{Topic: p.topic, Partition: w.partition, Value: txnValue(t.id, i)}
		index[recs[i]] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), txnOpTimeout)
	defer cancel()
	// The results come in the order the answers arrived, not the records'.
	for _, r := range p.cl.ProduceSync(ctx, recs...) {
		i := index[r.Record]
		if r.Err != nil {
			t.writes[i].err = r.Err
			if t.err == "" {
				t.err = fmt.Sprintf("produce record %d to p%d: %v", i, t.writes[i].partition, r.Err)
			}
			continue
		}
		t.writes[i].offset = r.Record.Offset
	}
}

// end commits the transaction if it is to be committed and every record was
// acknowledged, and aborts it otherwise (see endTransaction).
func (p *txnProducer) end(t *txn) {
	e := endTransaction(p.cl, t.err == "" && !t.wantAbort)
	t.commitSent, t.result = e.commitSent, e.result
	switch {
	case t.err == "":
		t.err = e.err
	case e.err != "":
		t.err += "; " + e.err
	}
	if e.drop {
		p.drop()
	}
}

// transactionEnd is how a transaction ended, as its client was told.
type transactionEnd struct {
	commitSent bool    // EndTransaction(TryCommit) may have reached the coordinator
	result     outcome // committed, aborted for certain, or unknown
	err        string  // the commit's or the abort's error, if any
	drop       bool    // the client could not abort: close it and start another
}

// endTransaction commits the client's transaction if commit is set, and aborts it
// otherwise. A commit that fails is followed by an abort (franz-go's documented
// recovery) and its outcome is unknown; so is that of a transaction the client
// cannot abort, and that client must be dropped.
func endTransaction(cl *kgo.Client, commit bool) transactionEnd {
	ctx, cancel := context.WithTimeout(context.Background(), txnOpTimeout)
	defer cancel()
	var e transactionEnd
	if commit {
		e.commitSent = true
		err := cl.EndTransaction(ctx, kgo.TryCommit)
		if err == nil {
			e.result = outcomeCommitted
			return e
		}
		if errors.Is(err, kerr.OperationNotAttempted) {
			e.commitSent = false // the producer id had failed: no EndTxn was sent
		}
		e.err = fmt.Sprintf("commit: %v", err)
	}
	err := cl.AbortBufferedRecords(ctx)
	if err == nil {
		err = cl.EndTransaction(ctx, kgo.TryAbort)
	}
	switch {
	case err != nil:
		if e.err != "" {
			e.err += "; "
		}
		e.err += fmt.Sprintf("abort: %v", err)
		e.drop = true
	case !e.commitSent:
		e.result = outcomeAborted
	}
	return e
}

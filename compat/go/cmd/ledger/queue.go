package main

// The queue workload (-queue N), Jepsen's Kafka "queue" test: N workers, each one
// franz-go client that is both a transactional producer and a read_committed
// consumer, run transactions of sends and polls over a rotating pool of keys
// (single-partition topics) while the ledger's faults run. Every transaction goes
// into a Jepsen-style history (JSON lines): an invocation, then a completion (ok:
// committed; fail: aborted for certain; info: unknown) with each send's offset and
// each poll's records. At the end every key is read back whole under read_committed
// and recorded as one last transaction, and keel-queue-check judges the history (see
// compat/queue): lost, duplicated and unseen values, inconsistent offsets, skipped
// and non-monotonic polls and sends, and, with the adya crate, aborted reads and
// dependency cycles of the history read as list-append.
//
// With -queue-group the workers are one consumer group instead (Jepsen's
// "subscribe" mode): each is a franz-go GroupTransactSession subscribed to every key,
// and each transaction sends the offsets of what it polled to the transaction, so
// that what committed transactions consumed covers each key once (checked as
// double-consume and consume-gap). A rebalance during a transaction aborts it, and an
// aborted transaction rewinds its consumer to the group's committed offsets.
//
// Keys rotate, as in Jepsen's generators: a key takes -queue-key-writes values and
// is then replaced by a new topic, so that no key's log, and no list a checker must
// compare, grows without bound.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// queueSpare is how many created keys wait to replace retired ones.
const queueSpare = 3

// keyPool is the keys: the active ones written to, the created ones waiting, and
// every key ever created (all are read back at the end).
type keyPool struct {
	mu        sync.Mutex
	base      string
	active    []int
	ready     []int
	created   []int
	writes    map[int]int
	retiredAt map[int]time.Time
	maxWrites int
}

func (k *keyPool) topic(key int) string { return fmt.Sprintf("%s-q%d", k.base, key) }

// pick draws n distinct active keys.
func (k *keyPool) pick(rng *rand.Rand, n int) []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := append([]int(nil), k.active...)
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys[:min(n, len(keys))]
}

// wrote counts a value sent to key; a key past its writes is replaced by a ready
// one (if none is ready yet, it takes more until one is).
func (k *keyPool) wrote(key int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.writes[key]++
	for i, a := range k.active {
		if a == key && k.writes[key] >= k.maxWrites && len(k.ready) > 0 {
			k.active[i], k.ready = k.ready[0], k.ready[1:]
			k.retiredAt[key] = time.Now()
		}
	}
}

// consumed is the keys a consumer follows: the active ones and those retired in the
// last few seconds (their last values may still be on the way).
func (k *keyPool) consumed() map[int]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[int]bool{}
	for _, a := range k.active {
		out[a] = true
	}
	for key, at := range k.retiredAt {
		if time.Since(at) < 5*time.Second {
			out[key] = true
		}
	}
	return out
}

func (k *keyPool) add(key int, activate bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.created = append(k.created, key)
	if activate {
		k.active = append(k.active, key)
	} else {
		k.ready = append(k.ready, key)
	}
}

func (k *keyPool) readyCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.ready)
}

func (k *keyPool) all() []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]int(nil), k.created...)
}

// history is the Jepsen-style history file: one JSON object per line.
type history struct {
	mu    sync.Mutex
	w     *bufio.Writer
	f     *os.File
	index int
	start time.Time
	err   error
}

func newHistory(path string) (*history, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &history{w: bufio.NewWriterSize(f, 1<<20), f: f, start: time.Now()}, nil
}

// write appends one operation: type invoke, ok, fail or info.
func (h *history) write(typ string, process int, value []any, note string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op := map[string]any{"index": h.index, "type": typ, "process": process, "f": "txn", "value": value,
		"time": time.Since(h.start).Nanoseconds()}
	if note != "" {
		op["error"] = note
	}
	h.index++
	line, err := json.Marshal(op)
	if err == nil {
		_, err = h.w.Write(append(line, '\n'))
	}
	if err != nil && h.err == nil {
		h.err = err
	}
}

func (h *history) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.w.Flush(); err != nil && h.err == nil {
		h.err = err
	}
	if err := h.f.Close(); err != nil && h.err == nil {
		h.err = err
	}
	return h.err
}

// queueStats counts what the workers did.
type queueStats struct {
	ok, fail, info, sends, polled, clients atomic.Int64
}

// queueWorker is one client: a process in the history until its client is
// replaced (after a transaction of unknown outcome), when it takes a new process
// number, as a crashed Jepsen client does.
type queueWorker struct {
	index, workers int
	cfg            config
	pool           *keyPool
	hist           *history
	stats          *queueStats
	values         *atomic.Int64
	rng            *rand.Rand
	cl             *kgo.Client
	sess           *kgo.GroupTransactSession // with -queue-group
	generation     int
	process        int
	following      map[int]bool
}

func (w *queueWorker) newClient() error {
	opts := []kgo.Opt{
		kgo.SeedBrokers(w.cfg.brokers...),
		kgo.TransactionalID(fmt.Sprintf("%s-queue-%d", w.pool.base, w.index)),
		kgo.TransactionTimeout(w.cfg.txnTimeout),
		kgo.RecordDeliveryTimeout(w.cfg.txnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.FetchIsolationLevel(w.isolation()),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.MetadataMinAge(w.cfg.metadataMinAge),
		kgo.DialTimeout(2 * time.Second),
	}
	if w.cfg.queueGroup {
		// New keys are found by the metadata refresh; a dropped client's member
		// leaves, or is gone after the session timeout.
		opts = append(opts,
			kgo.ConsumerGroup(w.pool.base+"-queue"),
			kgo.ConsumeRegex(),
			kgo.ConsumeTopics("^"+regexp.QuoteMeta(w.pool.base)+"-q[0-9]+$"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.MetadataMaxAge(time.Second),
			kgo.SessionTimeout(6*time.Second),
			kgo.HeartbeatInterval(time.Second),
		)
		sess, err := kgo.NewGroupTransactSession(opts...)
		if err != nil {
			return err
		}
		w.sess, w.cl, w.following = sess, sess.Client(), nil
	} else {
		following := w.pool.consumed()
		assign := map[string]map[int32]kgo.Offset{}
		for key := range following {
			assign[w.pool.topic(key)] = map[int32]kgo.Offset{0: kgo.NewOffset().At(0)}
		}
		cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(assign))...)
		if err != nil {
			return err
		}
		w.cl, w.following = cl, following
	}
	w.process = w.index + w.workers*w.generation
	w.generation++
	w.stats.clients.Add(1)
	return nil
}

// isolation is read_committed, or read_uncommitted with -queue-read-uncommitted: a
// check of the checker, whose polls then see aborted sends it must report.
func (w *queueWorker) isolation() kgo.IsolationLevel {
	if w.cfg.queueReadUncommitted {
		return kgo.ReadUncommitted()
	}
	return kgo.ReadCommitted()
}

func (w *queueWorker) drop() {
	if w.sess != nil {
		w.sess.Close()
	} else if w.cl != nil {
		w.cl.Close()
	}
	w.cl, w.sess = nil, nil
}

// follow brings the consumer's partitions in line with the pool: a new key is read
// from its start, a key retired a while ago is let go. A group member is given its
// keys by the group.
func (w *queueWorker) follow() {
	if w.sess != nil {
		return
	}
	want := w.pool.consumed()
	add := map[string]map[int32]kgo.Offset{}
	remove := map[string][]int32{}
	for key := range want {
		if !w.following[key] {
			add[w.pool.topic(key)] = map[int32]kgo.Offset{0: kgo.NewOffset().At(0)}
		}
	}
	for key := range w.following {
		if !want[key] {
			remove[w.pool.topic(key)] = []int32{0}
		}
	}
	if len(add) > 0 {
		w.cl.AddConsumePartitions(add)
	}
	if len(remove) > 0 {
		w.cl.RemoveConsumePartitions(remove)
	}
	w.following = want
}

// run paces transactions at rate per second until ctx ends; the transaction under
// way then is finished.
func (w *queueWorker) run(ctx context.Context, rate float64) {
	defer w.drop()
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for ctx.Err() == nil {
		if d := time.Until(next); d > 0 {
			_ = sleep(ctx, d)
			continue
		}
		next = next.Add(interval)
		if behind := time.Since(next); behind > time.Second {
			next = time.Now() // do not burst after a stall
		}
		if w.cl == nil {
			if err := w.newClient(); err != nil {
				_ = sleep(ctx, time.Second)
				continue
			}
		}
		w.follow()
		w.transaction()
	}
}

// microOp is one send or poll of a transaction.
type microOp struct {
	send   bool
	key    int
	value  int64
	offset int64              // a send's offset, -1 if not acknowledged
	polled map[int][][2]int64 // a poll's records: key -> [offset, value]...
}

// transaction runs one transaction: sends to distinct keys (a Kafka poll may end
// inside a committed transaction's records, so a transaction appends to a key at
// most once, and a poll never ends between two of its own values), a poll at a random
// place in about half of them, some aborted on purpose.
func (w *queueWorker) transaction() {
	keys := w.pool.pick(w.rng, 1+w.rng.IntN(3))
	var ops []microOp
	for _, key := range keys {
		ops = append(ops, microOp{send: true, key: key, value: w.values.Add(1), offset: -1})
	}
	if w.rng.IntN(2) == 0 {
		at := w.rng.IntN(len(ops) + 1)
		ops = append(ops[:at], append([]microOp{{}}, ops[at:]...)...)
	}
	wantAbort := w.rng.Float64() < w.cfg.txnAbort
	w.hist.write("invoke", w.process, w.encode(ops, false), "")
	if err := w.cl.BeginTransaction(); err != nil {
		w.hist.write("fail", w.process, w.encode(ops, false), "begin: "+err.Error())
		w.stats.fail.Add(1)
		w.drop()
		return
	}
	failed := ""
	for i := range ops {
		if failed != "" {
			break
		}
		op := &ops[i]
		if op.send {
			ctx, cancel := context.WithTimeout(context.Background(), txnOpTimeout)
			r := w.cl.ProduceSync(ctx, &kgo.Record{Topic: w.pool.topic(op.key), Partition: 0, Value: strconv.AppendInt(nil, op.value, 10)})
			cancel()
			if err := r.FirstErr(); err != nil {
				failed = fmt.Sprintf("send %d to key %d: %v", op.value, op.key, err)
				continue
			}
			op.offset = r[0].Record.Offset
			w.pool.wrote(op.key)
			w.stats.sends.Add(1)
			continue
		}
		op.polled = w.poll()
	}
	var e transactionEnd
	if w.sess != nil {
		e = endGroupTransaction(w.sess, failed == "" && !wantAbort)
	} else {
		e = endTransaction(w.cl, failed == "" && !wantAbort)
	}
	note := failed
	if e.err != "" {
		note = fmt.Sprintf("%s; %s", note, e.err)
	}
	switch e.result {
	case outcomeCommitted:
		w.hist.write("ok", w.process, w.encode(ops, true), "")
		w.stats.ok.Add(1)
	case outcomeAborted:
		w.hist.write("fail", w.process, w.encode(ops, true), note)
		w.stats.fail.Add(1)
	default:
		w.hist.write("info", w.process, w.encode(ops, true), note)
		w.stats.info.Add(1)
		e.drop = true // a new process after an unknown outcome, as in Jepsen
	}
	if e.drop {
		w.drop()
	}
}

// endGroupTransaction ends a group member's transaction: committed only with its
// polls' offsets (a rebalance since it began aborts it), aborted for certain when no
// error came back, of unknown outcome otherwise (and the session is replaced).
func endGroupTransaction(sess *kgo.GroupTransactSession, commit bool) transactionEnd {
	ctx, cancel := context.WithTimeout(context.Background(), txnOpTimeout)
	defer cancel()
	try := kgo.TryAbort
	if commit {
		try = kgo.TryCommit
	}
	committed, err := sess.End(ctx, try)
	switch {
	case err != nil:
		return transactionEnd{err: fmt.Sprintf("end: %v", err), drop: true}
	case committed:
		return transactionEnd{result: outcomeCommitted}
	default:
		return transactionEnd{result: outcomeAborted}
	}
}

// poll returns what one poll of at most 100 ms gave, key by key.
func (w *queueWorker) poll() map[int][][2]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	out := map[int][][2]int64{}
	fs := w.cl.PollRecords(ctx, 200)
	fs.EachRecord(func(r *kgo.Record) {
		key, ok := keyOf(w.pool.base, r.Topic)
		v, err := strconv.ParseInt(string(r.Value), 10, 64)
		if !ok || err != nil {
			v = -1 // not a value of this run: the checker reports it
		}
		out[key] = append(out[key], [2]int64{r.Offset, v})
		w.stats.polled.Add(1)
	})
	return out
}

// keyOf is the key of a topic named by keyPool.topic.
func keyOf(base, topic string) (int, bool) {
	prefix := base + "-q"
	if len(topic) <= len(prefix) || topic[:len(prefix)] != prefix {
		return -1, false
	}
	k, err := strconv.Atoi(topic[len(prefix):])
	return k, err == nil
}

// encode is the history value of a transaction: ["send", key, value] and ["poll"]
// on invocation; ["send", key, [offset, value]] (offset null if not acknowledged)
// and ["poll", {key: [[offset, value], ...]}] on completion.
func (w *queueWorker) encode(ops []microOp, done bool) []any {
	out := make([]any, 0, len(ops))
	for _, op := range ops {
		switch {
		case op.send && !done:
			out = append(out, []any{"send", op.key, op.value})
		case op.send:
			var offset any
			if op.offset >= 0 {
				offset = op.offset
			}
			out = append(out, []any{"send", op.key, []any{offset, op.value}})
		case !done:
			out = append(out, []any{"poll"})
		default:
			polled := map[string][][2]int64{}
			for key, recs := range op.polled {
				polled[strconv.Itoa(key)] = recs
			}
			out = append(out, []any{"poll", polled})
		}
	}
	return out
}

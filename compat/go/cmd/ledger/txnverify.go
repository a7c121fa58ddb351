package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// txnLogRecord is one record of the read-back: a transaction's record i, or a
// transaction marker (control record).
type txnLogRecord struct {
	offset     int64
	txn        int64 // -1 if the value is not "<txn>:<i>"
	i          int
	control    bool
	commit     bool // a marker: COMMIT (else ABORT)
	producerID int64
}

// parseTxnValue reads "<txn>:<i>"; ok is false for anything else.
func parseTxnValue(v []byte) (int64, int, bool) {
	txnPart, iPart, found := strings.Cut(string(v), ":")
	if !found {
		return -1, 0, false
	}
	id, err1 := strconv.ParseInt(txnPart, 10, 64)
	i, err2 := strconv.Atoi(iPart)
	if err1 != nil || err2 != nil || id < 0 || i < 0 {
		return -1, 0, false
	}
	return id, i, true
}

// readTxnLog reads every partition from offset 0 to ends[p] at an isolation level,
// keeping control records so that the read can tell it reached the end (under
// read_committed the last records of a partition are markers, and aborted records
// are dropped by the client). It returns what it read even when it stops early on
// the timeout, with an error saying where.
func readTxnLog(ctx context.Context, seeds []string, topic string, ends map[int32]int64, isolation kgo.IsolationLevel) (map[int32][]txnLogRecord, []string, error) {
	assign := map[int32]kgo.Offset{}
	for p := range ends {
		assign[p] = kgo.NewOffset().At(0)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}),
		kgo.FetchIsolationLevel(isolation),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	logs := map[int32][]txnLogRecord{}
	next := map[int32]int64{}
	var fetchErrors []string
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return logs, fetchErrors, fmt.Errorf("read back (%s) stopped after %v: read up to %v of %v",
				isolationName(isolation), readBackTimeout, next, ends)
		}
		for _, e := range fs.Errors() {
			fetchErrors = append(fetchErrors, fmt.Sprintf("%s %s-%d: %v", isolationName(isolation), e.Topic, e.Partition, e.Err))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			lr := txnLogRecord{offset: r.Offset, txn: -1, producerID: r.ProducerID}
			if r.Attrs.IsControl() {
				// The key of a marker is version (int16) and type (int16): 0 abort, 1 commit.
				lr.control = true
				lr.commit = len(r.Key) >= 4 && r.Key[2] == 0 && r.Key[3] == 1
			} else if id, i, ok := parseTxnValue(r.Value); ok {
				lr.txn, lr.i = id, i
			}
			logs[r.Partition] = append(logs[r.Partition], lr)
			next[r.Partition] = r.Offset + 1
		})
	}
	return logs, fetchErrors, nil
}

func isolationName(l kgo.IsolationLevel) string {
	if l == kgo.ReadCommitted() {
		return "read_committed"
	}
	return "read_uncommitted"
}

// txnVerdict is what the read-back says about the transactions.
type txnVerdict struct {
	txns, committed, aborted, unknown int
	unknownVisible, unknownInvisible  int // unknown outcomes that read_committed shows whole, or not at all
	abortedAfterError                 int // aborted after a write failed
	acked                             int // records the broker acknowledged
	rcRecords, ruRecords, markers     int

	abortedRead    []string // a transaction never committed, visible to read_committed
	lostCommit     []string // a committed transaction with records missing from read_committed
	partial        []string // some but not all of a transaction's records visible
	duplicates     []string // a record visible twice
	reordered      []string // a transaction's records out of write order, or one producer's transactions out of order
	lostAcked      []string // an acknowledged record not at its offset in read_uncommitted
	markerMismatch []string // read_committed disagrees with the markers read_uncommitted shows
	foreign        []string // a record this run did not write, or in the wrong partition
	unterminated   int      // records of read_uncommitted with no marker of their producer after them
	lsoStuck       int      // partitions whose LSO stayed below the high watermark
}

func (v txnVerdict) failed() bool {
	return len(v.abortedRead)+len(v.lostCommit)+len(v.partial)+len(v.duplicates)+len(v.reordered)+
		len(v.lostAcked)+len(v.markerMismatch)+len(v.foreign)+v.lsoStuck > 0
}

// checkTxns judges the read-back: rc is what read_committed returned up to
// rcEnds (the LSO), ru what read_uncommitted returned up to the high watermark.
func checkTxns(txns []*txn, rc, ru map[int32][]txnLogRecord, rcEnds map[int32]int64, parts int) txnVerdict {
	v := txnVerdict{txns: len(txns)}
	byID := map[int64]*txn{}
	for _, t := range txns {
		byID[t.id] = t
	}
	visible := checkCommittedLog(&v, byID, rc, parts)
	for _, t := range txns {
		judgeTxn(&v, t, len(visible[t.id]))
	}
	checkUncommittedLog(&v, txns, rc, ru, rcEnds, parts)
	return v
}

// checkCommittedLog reads read_committed's records: foreign ones, duplicates,
// order. It returns, for each transaction, which of its records are visible.
func checkCommittedLog(v *txnVerdict, byID map[int64]*txn, rc map[int32][]txnLogRecord, parts int) map[int64]map[int]bool {
	visible := map[int64]map[int]bool{}
	for p := int32(0); p < int32(parts); p++ {
		lastI := map[int64]int{}  // per transaction, its highest record seen here
		lastTxn := map[int]*txn{} // per producer, its latest committed-or-unknown transaction seen here
		for _, r := range rc[p] {
			if r.control {
				continue
			}
			v.rcRecords++
			t := byID[r.txn]
			if t == nil || r.i >= len(t.writes) || t.writes[r.i].partition != p {
				v.foreign = append(v.foreign, fmt.Sprintf("p%d@%d txn %d record %d", p, r.offset, r.txn, r.i))
				continue
			}
			if visible[t.id] == nil {
				visible[t.id] = map[int]bool{}
			}
			if visible[t.id][r.i] {
				v.duplicates = append(v.duplicates, fmt.Sprintf("txn %d record %d again at p%d@%d", t.id, r.i, p, r.offset))
				continue
			}
			visible[t.id][r.i] = true
			if prev, ok := lastI[t.id]; ok && r.i < prev {
				v.reordered = append(v.reordered, fmt.Sprintf("p%d@%d: txn %d record %d after its record %d", p, r.offset, t.id, r.i, prev))
			}
			lastI[t.id] = max(lastI[t.id], r.i)
			// One producer's transactions are sequential: one that asked for a commit
			// had every record acknowledged before the next began.
			if !t.commitSent {
				continue
			}
			if prev := lastTxn[t.producer]; prev != nil && prev.id > t.id {
				v.reordered = append(v.reordered, fmt.Sprintf("p%d@%d: txn %d of producer %d after its later txn %d", p, r.offset, t.id, t.producer, prev.id))
			} else {
				lastTxn[t.producer] = t
			}
		}
	}
	return visible
}

// judgeTxn checks one transaction against how much of it read_committed shows.
func judgeTxn(v *txnVerdict, t *txn, seen int) {
	size := len(t.writes)
	for _, w := range t.writes {
		if w.offset >= 0 {
			v.acked++
		}
	}
	switch t.result {
	case outcomeCommitted:
		v.committed++
	case outcomeAborted:
		v.aborted++
		if t.err != "" {
			v.abortedAfterError++
		}
	default:
		v.unknown++
		if seen == size {
			v.unknownVisible++
		} else if seen == 0 {
			v.unknownInvisible++
		}
	}
	desc := func() string {
		return fmt.Sprintf("txn %d (producer %d, %s, commit sent %v, %d of %d records visible, writes %s, error %q)",
			t.id, t.producer, t.result, t.commitSent, seen, size, describeWrites(t.writes), t.err)
	}
	if seen > 0 && (t.result == outcomeAborted || t.neverCommitted()) {
		v.abortedRead = append(v.abortedRead, desc())
	}
	if t.result == outcomeCommitted && seen < size {
		v.lostCommit = append(v.lostCommit, desc())
	}
	if seen > 0 && seen < size {
		v.partial = append(v.partial, desc())
	}
}

func describeWrites(ws []txnWrite) string {
	var b strings.Builder
	for i, w := range ws {
		if i > 0 {
			b.WriteByte(' ')
		}
		if w.offset >= 0 {
			fmt.Fprintf(&b, "p%d@%d", w.partition, w.offset)
		} else {
			fmt.Fprintf(&b, "p%d@-", w.partition)
		}
	}
	return b.String()
}

// checkUncommittedLog compares read_uncommitted with the acknowledgements (every
// acknowledged record at its offset) and with read_committed (a record below the
// LSO is visible exactly when the next marker of its producer is a COMMIT).
func checkUncommittedLog(v *txnVerdict, txns []*txn, rc, ru map[int32][]txnLogRecord, rcEnds map[int32]int64, parts int) {
	for p := int32(0); p < int32(parts); p++ {
		data := map[int64]txnLogRecord{}
		committedAt := map[int64]txnLogRecord{}
		for _, r := range rc[p] {
			if !r.control {
				committedAt[r.offset] = r
			}
		}
		// Walk backwards, so the marker of each producer seen last is the next one
		// after the record at hand.
		nextMarker := map[int64]txnLogRecord{}
		for k := len(ru[p]) - 1; k >= 0; k-- {
			r := ru[p][k]
			if r.control {
				v.markers++
				nextMarker[r.producerID] = r
				continue
			}
			v.ruRecords++
			data[r.offset] = r
			m, ok := nextMarker[r.producerID]
			if !ok {
				v.unterminated++
				continue
			}
			if r.offset >= rcEnds[p] {
				continue
			}
			c, shown := committedAt[r.offset]
			switch {
			case m.commit && !shown:
				v.markerMismatch = append(v.markerMismatch, fmt.Sprintf("p%d@%d txn %d record %d: COMMIT marker at @%d, not visible to read_committed", p, r.offset, r.txn, r.i, m.offset))
			case !m.commit && shown:
				v.markerMismatch = append(v.markerMismatch, fmt.Sprintf("p%d@%d txn %d record %d: ABORT marker at @%d, visible to read_committed", p, r.offset, r.txn, r.i, m.offset))
			case shown && (c.txn != r.txn || c.i != r.i):
				v.markerMismatch = append(v.markerMismatch, fmt.Sprintf("p%d@%d: read_committed has txn %d record %d, read_uncommitted txn %d record %d", p, r.offset, c.txn, c.i, r.txn, r.i))
			}
		}
		for off, c := range committedAt {
			if _, ok := data[off]; !ok {
				v.markerMismatch = append(v.markerMismatch, fmt.Sprintf("p%d@%d txn %d record %d: visible to read_committed, not in read_uncommitted", p, off, c.txn, c.i))
			}
		}
		for _, t := range txns {
			for i, w := range t.writes {
				if w.partition != p || w.offset < 0 {
					continue
				}
				if r, ok := data[w.offset]; !ok || r.txn != t.id || r.i != i {
					v.lostAcked = append(v.lostAcked, fmt.Sprintf("txn %d record %d acknowledged at p%d@%d (%s)", t.id, i, p, w.offset, t.result))
				}
			}
		}
	}
}

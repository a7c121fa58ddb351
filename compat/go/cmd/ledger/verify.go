package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// logRecord is one record read back: its offset and the id in its value (-1 if the
// value is not an id).
type logRecord struct {
	offset int64
	id     int64
	epoch  int32  // the batch's partition leader epoch
	probe  string // the value of a partition-mode probe record (then id is -1), else ""
}

const (
	endOffsetsTimeout = 30 * time.Second
	readBackTimeout   = 90 * time.Second
)

// endOffsets lists every partition's high watermark (ListOffsets, latest), which kgo
// sends to each partition's leader.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string, parts int) (map[int32]int64, error) {
	return endOffsetsAt(ctx, cl, topic, parts, 0)
}

// endOffsetsAt is endOffsets at an isolation level: 0 read_uncommitted (the high
// watermark), 1 read_committed (the last stable offset).
func endOffsetsAt(ctx context.Context, cl *kgo.Client, topic string, parts int, isolation int8) (map[int32]int64, error) {
	ends, err := listEnds(ctx, cl, map[string]int{topic: parts}, isolation)
	return ends[topic], err
}

// listEnds is the end offset of partitions 0..n-1 of each topic (n = want[topic]) at
// an isolation level, retried until every partition answers or endOffsetsTimeout.
func listEnds(ctx context.Context, cl *kgo.Client, want map[string]int, isolation int8) (map[string]map[int32]int64, error) {
	deadline := time.Now().Add(endOffsetsTimeout)
	total := 0
	for _, parts := range want {
		total += parts
	}
	var last error
	for time.Now().Before(deadline) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		req.IsolationLevel = isolation
		for topic, parts := range want {
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = topic
			for p := 0; p < parts; p++ {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition = int32(p)
				rp.Timestamp = -1
				rp.CurrentLeaderEpoch = -1
				t.Partitions = append(t.Partitions, rp)
			}
			req.Topics = append(req.Topics, t)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := req.RequestWith(rctx, cl)
		cancel()
		if err == nil {
			ends := map[string]map[int32]int64{}
			n := 0
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
						err = fmt.Errorf("%s partition %d: %w", rt.Topic, rp.Partition, e)
						continue
					}
					if ends[rt.Topic] == nil {
						ends[rt.Topic] = map[int32]int64{}
					}
					ends[rt.Topic][rp.Partition] = rp.Offset
					n++
				}
			}
			if err == nil && n == total {
				return ends, nil
			}
			if err == nil {
				err = fmt.Errorf("%d of %d partitions answered", n, total)
			}
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("list end offsets: %v", last)
}

// readBack reads every partition from offset 0 to ends[p] with a plain consumer
// (assigned partitions, no group). It returns what it read even when it stops early
// on the timeout, with an error saying where.
func readBack(ctx context.Context, seeds []string, topic string, ends map[int32]int64) (map[int32][]logRecord, []string, error) {
	assign := map[int32]kgo.Offset{}
	for p := range ends {
		assign[p] = kgo.NewOffset().At(0)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	logs := map[int32][]logRecord{}
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
			return logs, fetchErrors, fmt.Errorf("read back stopped after %v: read up to %v of %v", readBackTimeout, next, ends)
		}
		for _, e := range fs.Errors() {
			fetchErrors = append(fetchErrors, fmt.Sprintf("%s-%d: %v", e.Topic, e.Partition, e.Err))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			id, err := strconv.ParseInt(string(r.Value), 10, 64)
			if err != nil {
				id = -1
			}
			probe := ""
			if isProbe(r.Value) {
				probe = string(r.Value)
			}
			logs[r.Partition] = append(logs[r.Partition], logRecord{r.Offset, id, r.LeaderEpoch, probe})
			next[r.Partition] = r.Offset + 1
		})
	}
	return logs, fetchErrors, nil
}

// verdict is what the read-back says about the ledger.
type verdict struct {
	acked          int
	lost           []int64 // acknowledged, not in the log
	duplicates     []int64 // in the log more than once (one entry per extra copy)
	reordered      []string
	offsetMismatch []string // acknowledged at an offset that holds something else
	foreign        []string // not an id of this run, or an id in the wrong partition
	unackedPresent int      // failed or never-acknowledged ids found in the log
	logged         int
	probes         int // probe records in the log (partition mode), left to its own checks
}

func (v verdict) failed() bool {
	return len(v.lost)+len(v.duplicates)+len(v.reordered)+len(v.offsetMismatch)+len(v.foreign) > 0
}

// check compares the ledger with the log: every acknowledged id at the offset it was
// acknowledged at, no id twice, ids increasing in each partition both in the log and
// in the order acknowledgements arrived.
func check(acks []ack, logs map[int32][]logRecord, parts int) verdict {
	v := verdict{acked: len(acks)}
	type position struct {
		partition int32
		offset    int64
	}
	where := map[int64][]position{}
	for p := int32(0); p < int32(parts); p++ {
		maxID := int64(-1)
		for _, r := range logs[p] {
			if r.probe != "" {
				v.probes++
				continue
			}
			v.logged++
			if r.id < 0 || r.id%int64(parts) != int64(p) {
				v.foreign = append(v.foreign, fmt.Sprintf("p%d@%d id=%d", p, r.offset, r.id))
				continue
			}
			if len(where[r.id]) > 0 {
				v.duplicates = append(v.duplicates, r.id)
			} else if r.id < maxID {
				v.reordered = append(v.reordered, fmt.Sprintf("log p%d@%d: id %d after id %d", p, r.offset, r.id, maxID))
			}
			where[r.id] = append(where[r.id], position{p, r.offset})
			if r.id > maxID {
				maxID = r.id
			}
		}
	}
	acked := map[int64]bool{}
	lastAck := map[int32]ack{}
	for _, a := range acks {
		acked[a.id] = true
		if prev, ok := lastAck[a.partition]; ok && (a.id <= prev.id || a.offset <= prev.offset) {
			v.reordered = append(v.reordered, fmt.Sprintf("acks p%d: id %d@%d acknowledged after id %d@%d",
				a.partition, a.id, a.offset, prev.id, prev.offset))
		}
		lastAck[a.partition] = a
		ps := where[a.id]
		if len(ps) == 0 {
			v.lost = append(v.lost, a.id)
			continue
		}
		found := false
		for _, pos := range ps {
			found = found || pos == position{a.partition, a.offset}
		}
		if !found {
			v.offsetMismatch = append(v.offsetMismatch, fmt.Sprintf("id %d acked at p%d@%d, found at %v",
				a.id, a.partition, a.offset, ps))
		}
	}
	for id := range where {
		if !acked[id] {
			v.unackedPresent++
		}
	}
	sort.Slice(v.lost, func(i, j int) bool { return v.lost[i] < v.lost[j] })
	sort.Slice(v.duplicates, func(i, j int) bool { return v.duplicates[i] < v.duplicates[j] })
	return v
}

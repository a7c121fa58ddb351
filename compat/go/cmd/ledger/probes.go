package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// probeResult is one single-record acks=all Produce request sent to one node
// directly (no retries, no redirection): which node answered what, and when.
type probeResult struct {
	round     int
	node      int
	partition int32
	value     string
	sent, at  time.Time
	offset    int64 // the base offset the node acknowledged, on success
	err       error // nil when the node acknowledged the record
}

const (
	probeValuePrefix    = "probe "
	probeEvery          = 20 * time.Millisecond
	probeInFlightMax    = 8 // per node and partition; a tick finding them all busy is skipped
	probeTimeoutMillis  = 1500
	probeRequestTimeout = 4 * time.Second
	probeResultsMax     = 200_000
)

// probes pins writers to nodes: for every node and every partition given, a
// Produce request every probeEvery, each carrying a value that names it.
type probes struct {
	mu      sync.Mutex
	results []probeResult
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func startProbes(c *cluster, topicID [16]byte, round int, parts []int32) *probes {
	ctx, cancel := context.WithCancel(context.Background())
	p := &probes{stop: cancel}
	for _, id := range c.nodes() {
		for _, part := range parts {
			p.wg.Add(1)
			go p.run(ctx, c, topicID, round, id, part)
		}
	}
	return p
}

func (p *probes) run(ctx context.Context, c *cluster, topicID [16]byte, round, id int, part int32) {
	defer p.wg.Done()
	slots := make(chan struct{}, probeInFlightMax)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			// Wait for the requests in flight: their answers count.
			for i := 0; i < probeInFlightMax; i++ {
				slots <- struct{}{}
			}
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			continue
		}
		value := fmt.Sprintf("%sr%d n%d p%d #%d", probeValuePrefix, round, id, part, seq)
		go func() {
			defer func() { <-slots }()
			p.record(probeOnce(c, topicID, round, id, part, value))
		}()
	}
}

func (p *probes) record(r probeResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.results) < probeResultsMax {
		p.results = append(p.results, r)
	}
}

// finish stops the probes, waits for the answers still due, and returns them all.
func (p *probes) finish() []probeResult {
	p.stop()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]probeResult(nil), p.results...)
}

func probeOnce(c *cluster, topicID [16]byte, round, id int, part int32, value string) probeResult {
	r := probeResult{round: round, node: id, partition: part, value: value, sent: time.Now(), offset: -1}
	ctx, cancel := context.WithTimeout(context.Background(), probeRequestTimeout)
	defer cancel()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = probeTimeoutMillis
	t := kmsg.NewProduceRequestTopic()
	t.Topic = c.topic
	t.TopicID = topicID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = part
	rp.Records = singleRecordBatch([]byte(value), r.sent)
	t.Partitions = append(t.Partitions, rp)
	req.Topics = append(req.Topics, t)
	resp, err := c.probes[id-1].SeedBrokers()[0].Request(ctx, req)
	r.at = time.Now()
	if err != nil {
		r.err = err
		return r
	}
	pr := resp.(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 {
		r.err = fmt.Errorf("produce response with %d topics", len(pr.Topics))
		return r
	}
	got := pr.Topics[0].Partitions[0]
	if r.err = kerr.ErrorForCode(got.ErrorCode); r.err == nil {
		r.offset = got.BaseOffset
	}
	return r
}

// singleRecordBatch is a Kafka v2 record batch (KIP-98 layout) of one record with a
// null key, no headers and no producer id, its CRC32C filled in.
func singleRecordBatch(value []byte, now time.Time) []byte {
	var rec []byte
	rec = append(rec, 0)               // attributes
	rec = binary.AppendVarint(rec, 0)  // timestamp delta
	rec = binary.AppendVarint(rec, 0)  // offset delta
	rec = binary.AppendVarint(rec, -1) // key: null
	rec = binary.AppendVarint(rec, int64(len(value)))
	rec = append(rec, value...)
	rec = binary.AppendVarint(rec, 0) // headers
	records := binary.AppendVarint(nil, int64(len(rec)))
	records = append(records, rec...)

	ts := uint64(now.UnixMilli())
	b := make([]byte, batchHeaderBytes, batchHeaderBytes+len(records))
	binary.BigEndian.PutUint64(b[0:], 0)                                        // base offset
	binary.BigEndian.PutUint32(b[8:], uint32(batchHeaderBytes-12+len(records))) // batch length
	binary.BigEndian.PutUint32(b[12:], 0xffff_ffff)                             // partition leader epoch -1
	b[16] = 2                                                                   // magic
	// 17..21 crc, 21..23 attributes 0, 23..27 last offset delta 0
	binary.BigEndian.PutUint64(b[27:], ts)          // base timestamp
	binary.BigEndian.PutUint64(b[35:], ts)          // max timestamp
	binary.BigEndian.PutUint64(b[43:], ^uint64(0))  // producer id -1
	binary.BigEndian.PutUint16(b[51:], 0xffff)      // producer epoch -1
	binary.BigEndian.PutUint32(b[53:], 0xffff_ffff) // base sequence -1
	binary.BigEndian.PutUint32(b[57:], 1)           // records
	b = append(b, records...)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

func isProbe(value []byte) bool { return strings.HasPrefix(string(value), probeValuePrefix) }

// claim is one node's answer, at one moment, to "who leads this partition, in
// which leader epoch?".
type claim struct {
	by        int
	partition int32
	leader    int32
	epoch     int32
}

// sampler asks every node for the topic's leaders every samplerEvery and keeps
// each distinct claim.
type sampler struct {
	mu     sync.Mutex
	claims map[claim]time.Time // first seen
	stop   context.CancelFunc
	done   chan struct{}
}

const samplerEvery = 100 * time.Millisecond

func startSampler(c *cluster) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{claims: map[claim]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(samplerEvery)
		defer tick.Stop()
		for {
			for _, id := range c.nodes() {
				views, err := c.viewAll(ctx, id)
				if err != nil {
					continue
				}
				now := time.Now()
				s.mu.Lock()
				for p, v := range views {
					if v.leader < 0 {
						continue
					}
					k := claim{id, int32(p), v.leader, v.epoch}
					if _, ok := s.claims[k]; !ok {
						s.claims[k] = now
					}
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) finish() map[claim]time.Time {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims
}

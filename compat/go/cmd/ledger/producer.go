package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ack is one record the broker acknowledged: its id, where it was written, and when
// the client saw the acknowledgement.
type ack struct {
	id        int64
	partition int32
	offset    int64
	at        time.Time
}

// failure is one record the client gave up on (delivery timeout or a fatal error).
type failure struct {
	id        int64
	partition int32
	at        time.Time
	err       error
}

// ledger is every outcome of the producer, in the order the client reported them.
// Acknowledgements of one partition arrive in produce order (kgo promises that).
type ledger struct {
	mu       sync.Mutex
	acks     []ack
	failures []failure
	dataLoss []string
}

func (l *ledger) snapshot() ([]ack, []failure, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ack(nil), l.acks...), append([]failure(nil), l.failures...), append([]string(nil), l.dataLoss...)
}

// producerOptions is the client under test: idempotent (kgo's default), acks=all,
// a small linger, unlimited retries bounded by a delivery timeout.
func producerOptions(seeds []string, cfg config, l *ledger) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(cfg.linger),
		kgo.RecordDeliveryTimeout(cfg.deliveryTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(int(cfg.rate*cfg.deliveryTimeout.Seconds()) + 10_000),
		kgo.MetadataMinAge(cfg.metadataMinAge),
		kgo.DialTimeout(2 * time.Second),
		kgo.ProducerOnDataLossDetected(func(topic string, partition int32) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.dataLoss = append(l.dataLoss, fmt.Sprintf("%s-%d at %s", topic, partition, time.Now().Format(timeFormat)))
		}),
	}
}

// produce writes ids 0, 1, 2, ... at rate records per second, id i to partition
// i mod parts, until ctx ends; it returns how many ids it handed to the client.
// If the client falls behind, the ids due are handed over at once: the offered
// load stays fixed whatever the broker does.
func produce(ctx context.Context, cl *kgo.Client, topic string, parts int, rate float64, l *ledger) int64 {
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var next int64
	for {
		select {
		case <-ctx.Done():
			return next
		case <-tick.C:
		}
		due := int64(time.Since(start).Seconds() * rate)
		for ; next < due; next++ {
			id := next
			r := &kgo.Record{Topic: topic, Partition: int32(id % int64(parts)), Value: []byte(strconv.FormatInt(id, 10))}
			cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
				now := time.Now()
				l.mu.Lock()
				defer l.mu.Unlock()
				if err != nil {
					l.failures = append(l.failures, failure{id, r.Partition, now, err})
					return
				}
				l.acks = append(l.acks, ack{id, r.Partition, r.Offset, now})
			})
		}
	}
}

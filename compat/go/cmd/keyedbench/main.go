// Command keyedbench measures publish latency of keyed records over many partitions
// with franz-go, a client that packs every ready partition bound for a broker into one
// produce request (librdkafka sends one partition per request, so with 1,000
// partitions and 5 requests in flight its own queue dominates what it measures).
//
// Open loop: producer p of n sends its record i at t0 + (p/n + i)·n/rate and sleeps
// only while ahead; publish latency is acknowledgement time minus that intended time,
// so a stall is charged to every record queued behind it. The rate counts
// acknowledgements that arrive inside the measured window. Keys go round-robin over
// -keys distinct keys, topics round-robin over -topics, and franz-go's default
// partitioner hashes each key the way Kafka's Java client does. Values are random
// bytes and batches are sent uncompressed (franz-go's default is snappy). Before the clock
// starts every partition must acknowledge one priming record.
//
// -random draws each key at random from the key space instead.
//
// With -pid, the broker process is sampled over the measured window: CPU time
// (/proc/PID/stat), bytes it wrote (/proc/PID/io write_bytes, page-cache writes when
// dirtied and O_DIRECT when issued) per payload byte acknowledged, peak RSS (VmHWM),
// and fsyncs per second from perf's ext4:ext4_sync_file_enter tracepoint, which also
// sees fsyncs issued through io_uring (n/a without perf or the tracepoint). With
// -metrics (Keel's admin /metrics), also each shard's flush passes per second.
//
//	keyedbench -seed 127.0.0.1:9092 -topics 100 -partitions 10 -rate 20000 [-producers 4]
//	           [-size 1024] [-keys 10000] [-random] [-warmup 15s] [-duration 60s]
//	           [-linger 5ms] [-pid PID] [-metrics URL] [-json FILE]
//
// It prints one line of figures and, with -json FILE, writes them as JSON.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type result struct {
	Target      float64 `json:"target_records_per_s"`
	Acked       float64 `json:"acked_records_per_s"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	P50         float64 `json:"p50_ms"`
	P75         float64 `json:"p75_ms"`
	P95         float64 `json:"p95_ms"`
	P99         float64 `json:"p99_ms"`
	P999        float64 `json:"p999_ms"`
	Max         float64 `json:"max_ms"`
	Partitions  int     `json:"partitions"`
	PrimeSecond float64 `json:"prime_s"`
	Broker      *usage  `json:"broker,omitempty"`
}

func main() {
	seed := flag.String("seed", "127.0.0.1:9092", "bootstrap address")
	prefix := flag.String("topic", "keyed", "topic name prefix (topics are PREFIX-0 .. PREFIX-N-1)")
	topics := flag.Int("topics", 100, "topics")
	partitions := flag.Int("partitions", 10, "partitions per topic")
	rate := flag.Float64("rate", 20000, "records per second over all producers")
	producers := flag.Int("producers", 4, "producer clients")
	size := flag.Int("size", 1024, "value bytes")
	keySpace := flag.Int("keys", 10000, "distinct keys, used round-robin")
	warmup := flag.Duration("warmup", 15*time.Second, "warm-up before the measured window")
	duration := flag.Duration("duration", 60*time.Second, "measured window")
	linger := flag.Duration("linger", 5*time.Millisecond, "producer linger")
	random := flag.Bool("random", false, "random keys instead of round-robin")
	pid := flag.Int("pid", 0, "broker process to sample over the measured window")
	metrics := flag.String("metrics", "", "Keel's /metrics URL: flush passes per shard over the window")
	jsonOut := flag.String("json", "", "write the figures as JSON to this file")
	progress := flag.Bool("progress", false, "print acknowledgements and the largest latency of every second to stderr")
	flag.Parse()

	names := make([]string, *topics)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", *prefix, i)
	}
	primeStart := time.Now()
	if err := createAndPrime(*seed, names, *partitions); err != nil {
		fmt.Fprintln(os.Stderr, "keyedbench:", err)
		os.Exit(1)
	}
	primed := time.Since(primeStart).Seconds()
	var p *probe
	if *pid > 0 {
		p = &probe{pid: *pid, metrics: *metrics}
	}
	r := run(*seed, names, *producers, *rate, *size, *keySpace, *random, *warmup, *duration, *linger, p, *progress)
	r.Partitions = *topics * *partitions
	r.PrimeSecond = primed
	fmt.Printf("keyedbench: %d partitions, %.0f of %.0f records/s acked, publish ms p50 %.1f p75 %.1f p95 %.1f p99 %.1f p99.9 %.1f max %.1f, %d errors\n",
		r.Partitions, r.Acked, r.Target, r.P50, r.P75, r.P95, r.P99, r.P999, r.Max, r.Errors)
	if b := r.Broker; b != nil {
		fmt.Printf("  broker: %.2f cores, peak RSS %d MB, %.2f disk bytes per payload byte, fsyncs/s %s\n",
			b.Cores, b.PeakRSSMB, b.DiskBytesPerPayloadByte, b.fsyncText())
		if len(b.PassesPerShard) > 0 {
			fmt.Printf("  flush passes/s by shard: %v\n", b.PassesPerShard)
		}
	}
	if r.FirstError != "" {
		fmt.Println("  first error:", r.FirstError)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "keyedbench:", err)
			os.Exit(1)
		}
	}
}

// createAndPrime creates the topics (an existing one is kept) and has every partition
// acknowledge one record, so topic creation is not measured.
func createAndPrime(seed string, names []string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.UnknownTopicRetries(-1))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 60000
	for _, name := range names {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic = name
		t.NumPartitions = int32(partitions)
		t.ReplicationFactor = -1
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, t := range resp.Topics {
		if e := kerr.ErrorForCode(t.ErrorCode); e != nil && !errors.Is(e, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create %s: %w", t.Topic, e)
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	for _, name := range names {
		for p := 0; p < partitions; p++ {
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Topic: name, Partition: int32(p), Value: []byte("p")}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Store(err)
				}
				wg.Done()
			})
		}
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return fmt.Errorf("priming: %w", err)
	}
	return nil
}

func run(seed string, names []string, producers int, rate float64, size, keySpace int, random bool,
	warmup, duration, linger time.Duration, p *probe, progress bool) result {
	t0 := time.Now().Add(200 * time.Millisecond)
	from, to := t0.Add(warmup), t0.Add(warmup+duration)
	sampled := make(chan *usage, 1)
	go func() {
		if p == nil {
			sampled <- nil
			return
		}
		time.Sleep(time.Until(from))
		p.begin()
		time.Sleep(time.Until(to))
		sampled <- p.end(duration)
	}()
	interval := time.Duration(float64(time.Second) * float64(producers) / rate)
	var mu sync.Mutex
	var latencies []time.Duration
	var errs, ackedInWindow, secondAcks, secondMax atomic.Int64
	if progress {
		go func() {
			for t := t0.Add(time.Second); t.Before(to.Add(5 * time.Second)); t = t.Add(time.Second) {
				time.Sleep(time.Until(t))
				fmt.Fprintf(os.Stderr, "keyedbench %5.1fs: %d acks, max %.1f ms\n", t.Sub(t0).Seconds(),
					secondAcks.Swap(0), float64(secondMax.Swap(0))/1000)
			}
		}()
	}
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.DisableIdempotentWrite(), kgo.ProducerLinger(linger), kgo.ProducerBatchMaxBytes(65536),
			kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.MaxBufferedRecords(1<<20), kgo.MaxProduceRequestsInflightPerBroker(5))
		if err != nil {
			fmt.Fprintln(os.Stderr, "keyedbench:", err)
			os.Exit(1)
		}
		wg.Add(1)
		go func(p int, cl *kgo.Client) {
			defer wg.Done()
			defer cl.Close()
			var pending sync.WaitGroup
			rng := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano())))
			value := make([]byte, size) // random, so no layer can compress it away
			for i := range value {
				value[i] = byte(rng.Uint32())
			}
			start := t0.Add(time.Duration(float64(interval) * float64(p) / float64(producers)))
			mine := make([]time.Duration, 0, 1<<16)
			var mineMu sync.Mutex
			for i := 0; ; i++ {
				intended := start.Add(time.Duration(i) * interval)
				if !intended.Before(to) {
					break
				}
				if d := time.Until(intended); d > 0 {
					time.Sleep(d)
				}
				n := i*producers + p
				key := n % keySpace
				if random {
					key = rng.IntN(keySpace)
				}
				rec := &kgo.Record{
					Topic: names[n%len(names)],
					Key:   []byte(fmt.Sprintf("key-%08d", key)),
					Value: value,
				}
				measured := !intended.Before(from)
				pending.Add(1)
				cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
					defer pending.Done()
					if err != nil {
						if errs.Add(1) == 1 {
							firstErr.Store(err.Error())
						}
						return
					}
					now := time.Now()
					secondAcks.Add(1)
					if us := now.Sub(intended).Microseconds(); us > secondMax.Load() {
						secondMax.Store(us) // a racy max is enough for a progress line
					}
					if !now.Before(from) && now.Before(to) {
						ackedInWindow.Add(1)
					}
					if measured {
						lat := now.Sub(intended)
						mineMu.Lock()
						mine = append(mine, lat)
						mineMu.Unlock()
					}
				})
			}
			pending.Wait()
			mineMu.Lock()
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
			mineMu.Unlock()
		}(p, cl)
	}
	wg.Wait()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	r := result{Target: rate, Errors: errs.Load(), Acked: float64(ackedInWindow.Load()) / duration.Seconds()}
	if r.Broker = <-sampled; r.Broker != nil && r.Acked > 0 {
		r.Broker.DiskBytesPerPayloadByte = float64(r.Broker.writeBytes) / (r.Acked * duration.Seconds() * float64(size))
	}
	if s, ok := firstErr.Load().(string); ok {
		r.FirstError = s
	}
	if len(latencies) > 0 {
		pct := func(q float64) float64 {
			return float64(latencies[int(float64(len(latencies)-1)*q)].Microseconds()) / 1000
		}
		r.P50, r.P75, r.P95, r.P99, r.P999, r.Max = pct(0.5), pct(0.75), pct(0.95), pct(0.99), pct(0.999), pct(1)
	}
	return r
}

// Command offsets checks that a consumer group's committed offsets are linearizable
// while its coordinator is killed and paused. Several clients commit (OffsetCommit of
// an empty group, generation -1) and read (OffsetFetch) the offsets of one group's
// partitions, each partition a register; every operation's invocation and answer
// times are recorded, and porcupine (github.com/anishathalye/porcupine) checks the
// history against a register model, one partition at a time.
//
// Each operation is one request to one broker (no client retries unless -retries), and
// the history names the node that answered it. A commit that
// failed or timed out may or may not have taken effect (an entry can still commit
// after its leader lost leadership), so it is kept with an open end; a failed read is
// dropped. Values are unique, so every read names the one write it saw.
//
// Faults, every -interval, in turn from -faults: the group's coordinator
// (FindCoordinator) is killed with `cluster.sh kill` and restarted after -down, stopped
// with SIGSTOP and resumed, or cut off from the other nodes with `netns.sh isolate`
// (clients still reach it) and healed. Exit status: 0 linearizable, 1 not, 2 the run could not finish or the
// checker timed out.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type config struct {
	brokers    []string
	clusterDir string
	clusterSh  string
	topic      string
	group      string
	partitions int
	clients    int
	readers    int
	duration   time.Duration
	interval   time.Duration
	down       time.Duration
	opTimeout  time.Duration
	seed       uint64
	faults     []string
	faultSh    string
	history    string
	retries    int
}

// answeredBy remembers which node answered a client's last OffsetCommit or OffsetFetch
// (each client has one operation in flight), for the history.
type answeredBy struct{ node atomic.Int32 }

func (a *answeredBy) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && (key == 8 || key == 9) {
		a.node.Store(meta.NodeID)
	}
}

// outcome is an operation's metadata in the history: the node that answered (-1: none)
// and, for a commit whose outcome is unknown, when the client gave up.
type outcome struct {
	node   int32
	gaveUp int64
}

// input is one operation on partition key's register: a commit of value, or a read.
type input struct {
	key   int32
	write bool
	value int64
}

// noOffset is what a read of a partition with no committed offset returns.
const noOffset = -1

func main() {
	var cfg config
	var brokers string
	flag.StringVar(&brokers, "brokers", "127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094", "Kafka addresses of nodes 1..n, in node order")
	flag.StringVar(&cfg.clusterDir, "cluster-dir", "", "directory of the cluster compat/cluster.sh started (required)")
	flag.StringVar(&cfg.clusterSh, "cluster-sh", "compat/cluster.sh", "path of compat/cluster.sh")
	flag.StringVar(&cfg.topic, "topic", fmt.Sprintf("offsets-%d", time.Now().Unix()), "topic whose partitions' offsets are committed")
	flag.StringVar(&cfg.group, "group", fmt.Sprintf("offsets-%d", time.Now().Unix()), "group the offsets are committed for")
	flag.IntVar(&cfg.partitions, "partitions", 4, "partitions (registers)")
	flag.IntVar(&cfg.clients, "clients", 4, "concurrent clients that commit and read")
	flag.IntVar(&cfg.readers, "readers", 2, "concurrent clients that only read, one read per 2 ms at most (they keep asking a coordinator the writers have left)")
	flag.DurationVar(&cfg.duration, "duration", 60*time.Second, "how long clients run")
	flag.DurationVar(&cfg.interval, "interval", 6*time.Second, "time between coordinator faults (0: none)")
	flag.DurationVar(&cfg.down, "down", 2*time.Second, "how long a killed or paused coordinator stays down")
	flag.DurationVar(&cfg.opTimeout, "op-timeout", 5*time.Second, "bound of one commit or read")
	flag.StringVar(&cfg.history, "history", "history.jsonl", "file for the history, Jepsen-style JSON lines (invoke and ok/info events); none if empty")
	faults := flag.String("faults", "kill,pause", "coordinator faults, in turn: kill, pause, partition (comma-separated; \"both\" is kill,pause)")
	flag.StringVar(&cfg.faultSh, "fault-sh", "compat/faults/netns.sh", "path of compat/faults/netns.sh (partition faults; the cluster must run in its namespaces)")
	flag.IntVar(&cfg.retries, "retries", 0, "franz-go request retries per operation (0: one request, so no commit can take effect twice)")
	flag.Uint64Var(&cfg.seed, "seed", uint64(time.Now().UnixNano()), "seed of the clients' choices")
	recheck := flag.String("check", "", "check the history in this file (written by an earlier run) instead of running")
	flag.Parse()
	if *recheck != "" {
		os.Exit(checkFile(*recheck))
	}
	cfg.brokers = strings.Split(brokers, ",")
	if *faults == "both" {
		*faults = "kill,pause"
	}
	cfg.faults = strings.Split(*faults, ",")
	for _, f := range cfg.faults {
		if _, ok := faultVerbs[f]; !ok {
			fmt.Fprintf(os.Stderr, "offsets: unknown fault %q\n", f)
			os.Exit(2)
		}
	}
	if cfg.clusterDir == "" || cfg.partitions < 1 || cfg.clients < 1 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

func run(cfg config) int {
	ctx := context.Background()
	admin, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...))
	if err != nil {
		fmt.Fprintln(os.Stderr, "offsets:", err)
		return 2
	}
	defer admin.Close()
	if err := createTopic(ctx, admin, cfg.topic, cfg.partitions); err != nil {
		fmt.Fprintln(os.Stderr, "offsets:", err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "offsets: group %s, %d partitions of %s, %d clients and %d readers for %v, a coordinator fault every %v, seed %d\n",
		cfg.group, cfg.partitions, cfg.topic, cfg.clients, cfg.readers, cfg.duration, cfg.interval, cfg.seed)

	start := time.Now()
	var mu sync.Mutex
	var history []porcupine.Operation
	var commits, reads, unknown, failedReads int
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	stamp := func() int64 { return time.Since(start).Nanoseconds() }

	runCtx, stop := context.WithTimeout(ctx, cfg.duration)
	defer stop()
	var wg sync.WaitGroup
	for id := 0; id < cfg.clients+cfg.readers; id++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(id)))
			// One attempt per operation: a retried commit could take effect twice (once
			// where the first attempt landed, once where the retry did), which a register
			// model cannot tell from a broker's fault.
			answered := &answeredBy{}
			cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...), kgo.RequestRetries(cfg.retries), kgo.WithHooks(answered))
			if err != nil {
				fmt.Fprintln(os.Stderr, "offsets:", err)
				return
			}
			defer cl.Close()
			for seq := int64(1); runCtx.Err() == nil; seq++ {
				var err error
				opCtx, cancel := context.WithTimeout(ctx, cfg.opTimeout)
				if id < cfg.clients && rng.IntN(2) == 0 {
					key := int32(rng.IntN(cfg.partitions))
					value := int64(id)*1_000_000_000 + seq
					answered.node.Store(-1)
					call := stamp()
					err = commit(opCtx, cl, cfg, key, value)
					ret := stamp()
					meta := outcome{node: answered.node.Load(), gaveUp: ret}
					mu.Lock()
					commits++
					if err != nil {
						unknown++ // it may still take effect: no end
						ret = math.MaxInt64
					}
					mu.Unlock()
					record(porcupine.Operation{ClientId: id, Input: input{key: key, write: true, value: value}, Call: call,
						Output: int64(0), Return: ret, Metadata: meta})
				} else {
					answered.node.Store(-1)
					call := stamp()
					var got map[int32]int64
					got, err = fetch(opCtx, cl, cfg)
					ret := stamp()
					meta := outcome{node: answered.node.Load()}
					mu.Lock()
					reads++
					if err != nil {
						failedReads++
					}
					mu.Unlock()
					if err == nil {
						for key, value := range got {
							record(porcupine.Operation{ClientId: id, Input: input{key: key}, Call: call, Output: value, Return: ret,
								Metadata: meta})
						}
					}
				}
				cancel()
				if id >= cfg.clients {
					// Readers are paced: porcupine's memory grows with the square of
					// the operations on one partition.
					time.Sleep(2 * time.Millisecond)
				}
				if err != nil {
					// A node down refuses at once: back off rather than fill the
					// history with failures.
					time.Sleep(20 * time.Millisecond)
				}
			}
		}(id)
	}
	faults := 0
	var faultErr error
	if cfg.interval > 0 {
		faults, faultErr = injectFaults(runCtx, admin, cfg)
	}
	wg.Wait()
	if faultErr != nil {
		fmt.Fprintln(os.Stderr, "offsets: faults stopped:", faultErr)
	}

	if cfg.history != "" {
		if err := writeHistory(cfg.history, history); err != nil {
			fmt.Fprintln(os.Stderr, "offsets: history:", err)
		}
	}
	fmt.Printf("offsets: commits=%d (outcome unknown %d) reads=%d (failed %d) coordinator_faults=%d\n",
		commits, unknown, reads, failedReads, faults)
	verdict := check(history)
	if verdict == 0 && (faultErr != nil || commits == 0 || reads == 0) {
		return 2
	}
	return verdict
}

// check checks a history with porcupine: 0 linearizable, 1 not (drawn in
// offsets-history.html), 2 undecided.
func check(history []porcupine.Operation) int {
	history, seen := settleUnknown(history)
	result, info := porcupine.CheckOperationsVerbose(registerModel(), history, 2*time.Minute)
	fmt.Printf("offsets: operations checked=%d (unknown commits a read saw: %d) linearizable=%s\n", len(history), seen, result)
	switch result {
	case porcupine.Ok:
		return 0
	case porcupine.Illegal:
		path := "offsets-history.html"
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(registerModel(), info, f)
			f.Close()
			fmt.Printf("NOT LINEARIZABLE: the history is drawn in %s\n", path)
		}
		return 1
	}
	return 2
}

// checkFile checks a history file that writeHistory wrote.
func checkFile(path string) int {
	ops, err := readHistory(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "offsets:", err)
		return 2
	}
	return check(ops)
}

// settleUnknown gives every commit of unknown outcome the end the reads decide, which
// changes no verdict and keeps the search small (each open-ended commit is concurrent
// with everything after it):
//   - one that no read saw is dropped: it may not have taken effect, and taking effect
//     could only make a history illegal (values are unique, so no read depends on it);
//   - one that a read saw took effect before that read ended, so it ends at the first
//     such read's end (or stays open if that read began before it, which no
//     linearization allows either way).
//
// Returns the operations to check and how many unknown commits a read saw.
func settleUnknown(ops []porcupine.Operation) ([]porcupine.Operation, int) {
	type keyValue struct {
		key   int32
		value int64
	}
	firstRead := map[keyValue]int64{}
	for _, op := range ops {
		in := op.Input.(input)
		if in.write {
			continue
		}
		kv := keyValue{in.key, op.Output.(int64)}
		if end, ok := firstRead[kv]; !ok || op.Return < end {
			firstRead[kv] = op.Return
		}
	}
	kept := ops[:0:0]
	seen := 0
	for _, op := range ops {
		in := op.Input.(input)
		if in.write && op.Return == math.MaxInt64 {
			end, ok := firstRead[keyValue{in.key, in.value}]
			if !ok {
				continue
			}
			seen++
			if end > op.Call {
				op.Return = end
			}
		}
		kept = append(kept, op)
	}
	return kept, seen
}

// historyEvent is one line of a history file.
type historyEvent struct {
	Process int    `json:"process"`
	Type    string `json:"type"`
	F       string `json:"f"`
	Key     int32  `json:"key"`
	Value   *int64 `json:"value"`
	TimeNs  int64  `json:"time"`
	Node    *int32 `json:"node,omitempty"`
}

// writeHistory writes the operations as Jepsen-style events, one JSON object a line in
// time order: an "invoke" at each call and, at its return, "ok" (or "info" when the
// client gave up on a commit whose outcome is unknown).
func writeHistory(path string, ops []porcupine.Operation) error {
	var events []historyEvent
	for _, op := range ops {
		in := op.Input.(input)
		f := "fetch"
		var value *int64
		if in.write {
			f, value = "commit", &in.value
		}
		meta := op.Metadata.(outcome)
		var node *int32
		if meta.node >= 0 {
			node = &meta.node
		}
		events = append(events, historyEvent{op.ClientId, "invoke", f, in.key, value, op.Call, nil})
		switch {
		case op.Return == math.MaxInt64:
			events = append(events, historyEvent{op.ClientId, "info", f, in.key, value, meta.gaveUp, node})
		case in.write:
			events = append(events, historyEvent{op.ClientId, "ok", f, in.key, value, op.Return, node})
		default:
			read := op.Output.(int64)
			events = append(events, historyEvent{op.ClientId, "ok", f, in.key, &read, op.Return, node})
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].TimeNs < events[j].TimeNs })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// readHistory reads back what writeHistory wrote: each process has one operation on a
// key in flight, so an invocation pairs with the next completion of its process, kind
// and key.
func readHistory(path string) ([]porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type pending struct {
		process int
		f       string
		key     int32
	}
	calls := map[pending]int64{}
	var ops []porcupine.Operation
	dec := json.NewDecoder(f)
	for {
		var e historyEvent
		if err := dec.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		at := pending{e.Process, e.F, e.Key}
		if e.Type == "invoke" {
			calls[at] = e.TimeNs
			continue
		}
		call, ok := calls[at]
		if !ok || e.Value == nil {
			return nil, fmt.Errorf("%s: a %s with no invocation or value", path, e.Type)
		}
		delete(calls, at)
		meta := outcome{node: -1, gaveUp: e.TimeNs}
		if e.Node != nil {
			meta.node = *e.Node
		}
		op := porcupine.Operation{ClientId: e.Process, Call: call, Return: e.TimeNs, Metadata: meta}
		switch {
		case e.F == "fetch":
			op.Input, op.Output = input{key: e.Key}, *e.Value
		case e.Type == "info":
			op.Input, op.Output, op.Return = input{key: e.Key, write: true, value: *e.Value}, int64(0), math.MaxInt64
		default:
			op.Input, op.Output = input{key: e.Key, write: true, value: *e.Value}, int64(0)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

func registerModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[int32][]porcupine.Operation{}
			for _, op := range history {
				k := op.Input.(input).key
				byKey[k] = append(byKey[k], op)
			}
			keys := make([]int32, 0, len(byKey))
			for k := range byKey {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() interface{} { return int64(noOffset) },
		Step: func(state, in, out interface{}) (bool, interface{}) {
			i := in.(input)
			if i.write {
				return true, i.value
			}
			return out.(int64) == state.(int64), state
		},
		DescribeOperation: func(in, out interface{}) string {
			i := in.(input)
			if i.write {
				return fmt.Sprintf("commit p%d = %d", i.key, i.value)
			}
			return fmt.Sprintf("fetch p%d -> %d", i.key, out.(int64))
		},
	}
}

func createTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, int32(partitions), 3
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.ErrorCode != 0 && t.ErrorCode != 36 { // 36: TOPIC_ALREADY_EXISTS
			return fmt.Errorf("create topic %s: error %d", topic, t.ErrorCode)
		}
	}
	return nil
}

// commit commits value as partition key's offset for the group, as an empty group's
// member does (generation -1, no member id).
func commit(ctx context.Context, cl *kgo.Client, cfg config, key int32, value int64) error {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = cfg.group, -1
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = cfg.topic
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset, p.LeaderEpoch = key, value, -1
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return fmt.Errorf("commit p%d: error %d", p.Partition, p.ErrorCode)
			}
		}
	}
	return nil
}

// fetch reads the group's committed offset of every partition (noOffset where none).
func fetch(ctx context.Context, cl *kgo.Client, cfg config) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = cfg.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = cfg.topic
	for p := 0; p < cfg.partitions; p++ {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = cfg.group
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic, gt.Partitions = cfg.topic, rt.Partitions
	g.Topics = append(g.Topics, gt)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	got := map[int32]int64{}
	add := func(code int16, p int32, offset int64) error {
		if code != 0 {
			return fmt.Errorf("fetch p%d: error %d", p, code)
		}
		got[p] = offset
		return nil
	}
	if len(resp.Groups) > 0 { // v8 and later answer per group
		g := resp.Groups[0]
		if g.ErrorCode != 0 {
			return nil, fmt.Errorf("fetch: group error %d", g.ErrorCode)
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if err := add(p.ErrorCode, p.Partition, p.Offset); err != nil {
					return nil, err
				}
			}
		}
	} else {
		if resp.ErrorCode != 0 {
			return nil, fmt.Errorf("fetch: error %d", resp.ErrorCode)
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := add(p.ErrorCode, p.Partition, p.Offset); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(got) != cfg.partitions {
		return nil, fmt.Errorf("fetch answered %d of %d partitions", len(got), cfg.partitions)
	}
	return got, nil
}

// injectFaults kills and pauses the group's coordinator in turn until ctx ends; gives
// how many faults it injected.
func injectFaults(ctx context.Context, cl *kgo.Client, cfg config) (int, error) {
	faults := 0
	for {
		select {
		case <-ctx.Done():
			return faults, nil
		case <-time.After(cfg.interval):
		}
		node, err := coordinator(ctx, cl, cfg.group)
		if err != nil {
			if ctx.Err() != nil {
				return faults, nil
			}
			return faults, err
		}
		verbs := faultVerbs[cfg.faults[faults%len(cfg.faults)]]
		stop, resume := verbs[0], verbs[1]
		if err := faultCommand(cfg, stop, node); err != nil {
			return faults, err
		}
		faults++
		time.Sleep(cfg.down)
		if err := faultCommand(cfg, resume, node); err != nil {
			return faults, err
		}
		fmt.Fprintf(os.Stderr, "offsets: fault %d: coordinator node %d %s, %s after %v\n", faults, node, stop, resume, cfg.down)
	}
}

func coordinator(ctx context.Context, cl *kgo.Client, group string) (int32, error) {
	for attempt := 0; ; attempt++ {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			if len(resp.Coordinators) > 0 && resp.Coordinators[0].ErrorCode == 0 {
				return resp.Coordinators[0].NodeID, nil
			}
			if len(resp.Coordinators) == 0 && resp.ErrorCode == 0 {
				return resp.NodeID, nil
			}
		}
		if attempt >= 50 || ctx.Err() != nil {
			return 0, fmt.Errorf("no coordinator for group %s: %v", group, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// faultVerbs: each fault's commands to start and to undo it.
var faultVerbs = map[string][2]string{
	"kill":      {"kill", "restart"},
	"pause":     {"pause", "resume"},
	"partition": {"isolate", "heal"},
}

// faultCommand runs verb on node: `netns.sh isolate|heal` (cut off from the other two
// nodes, clients still reaching it), else `cluster.sh`.
func faultCommand(cfg config, verb string, node int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var cmd *exec.Cmd
	switch verb {
	case "isolate":
		cmd = exec.CommandContext(ctx, cfg.faultSh, verb, fmt.Sprint(node), "3")
	case "heal":
		cmd = exec.CommandContext(ctx, cfg.faultSh, verb, fmt.Sprint(node))
	default:
		cmd = exec.CommandContext(ctx, cfg.clusterSh, verb, fmt.Sprint(node), cfg.clusterDir)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s %d: %w: %s", cmd.Path, verb, node, err, strings.TrimSpace(string(out)))
	}
	return nil
}

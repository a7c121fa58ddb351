package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cluster is the Keel cluster as the harness sees it: one probe client per node,
// so that each node can be asked for its own view of the topic's leaders, and
// compat/cluster.sh for kill -9 and restart. Node i (1-based) is addrs[i-1].
type cluster struct {
	script      string
	faultScript string // -fault partition: compat/faults/netns.sh
	dir         string
	addrs       []string
	probes      []*kgo.Client
	topic       string
	parts       int
	// With -txn: the __transaction_state partitions of the producers' transactional
	// ids, whose leaders (the transaction coordinators) every view lists after the
	// topic's partitions, at index parts + i.
	coordinators []int32
}

// leaderView is one partition's leader and leader epoch as a node reports it.
type leaderView struct {
	leader int32
	epoch  int32
}

const (
	metadataRequestTimeout = 1500 * time.Millisecond
	probeInterval          = 50 * time.Millisecond
	killTimeout            = 10 * time.Second
	restartTimeout         = 90 * time.Second
	createTopicTimeout     = 30 * time.Second
)

func newCluster(script, dir string, addrs []string, topic string, parts int) (*cluster, error) {
	c := &cluster{script: script, dir: dir, addrs: addrs, topic: topic, parts: parts}
	for _, a := range addrs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(a), kgo.DialTimeout(time.Second), kgo.RequestRetries(0))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("probe client for %s: %w", a, err)
		}
		c.probes = append(c.probes, cl)
	}
	return c, nil
}

func (c *cluster) close() {
	for _, p := range c.probes {
		p.Close()
	}
}

func (c *cluster) nodes() []int {
	ids := make([]int, len(c.addrs))
	for i := range ids {
		ids[i] = i + 1
	}
	return ids
}

// view asks node id for the leader of every partition of the topic. It fails unless
// the node answers in time and knows a leader for every partition.
func (c *cluster) view(ctx context.Context, id int) ([]leaderView, error) {
	out, err := c.viewAll(ctx, id)
	if err != nil {
		return nil, err
	}
	for p, v := range out {
		if v.leader < 0 {
			return nil, fmt.Errorf("node %d: %s has no leader", id, c.describe(p))
		}
	}
	return out, nil
}

// viewAll is view that accepts partitions without a leader (leader -1).
func (c *cluster) viewAll(ctx context.Context, id int) ([]leaderView, error) {
	m, err := c.metadata(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]leaderView, c.parts, c.parts+len(c.coordinators))
	seen := 0
	for _, p := range c.topicOf(m, c.topic).Partitions {
		if p.Partition < 0 || int(p.Partition) >= c.parts {
			continue
		}
		out[p.Partition] = leaderView{p.Leader, p.LeaderEpoch}
		if p.Leader < 0 {
			out[p.Partition] = leaderView{-1, -1}
		}
		seen++
	}
	if seen != c.parts {
		return nil, fmt.Errorf("node %d: %d of %d partitions in metadata", id, seen, c.parts)
	}
	return c.appendCoordinators(m, id, out)
}

// appendCoordinators appends the leaders of the watched __transaction_state
// partitions to a view.
func (c *cluster) appendCoordinators(m *kmsg.MetadataResponse, id int, out []leaderView) ([]leaderView, error) {
	if len(c.coordinators) == 0 {
		return out, nil
	}
	t := c.topicOf(m, transactionTopic)
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		return nil, fmt.Errorf("node %d: topic %s: %w", id, transactionTopic, err)
	}
	for _, want := range c.coordinators {
		v := leaderView{-1, -1}
		for _, p := range t.Partitions {
			if p.Partition == want && p.Leader >= 0 {
				v = leaderView{p.Leader, p.LeaderEpoch}
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// describe names the partition at index i of a view.
func (c *cluster) describe(i int) string {
	if i < c.parts {
		return fmt.Sprintf("partition %d", i)
	}
	return fmt.Sprintf("%s partition %d", transactionTopic, c.coordinators[i-c.parts])
}

// topicOf is the metadata of topic name in m (an empty entry if m lacks it).
func (c *cluster) topicOf(m *kmsg.MetadataResponse, name string) kmsg.MetadataResponseTopic {
	for _, t := range m.Topics {
		if t.Topic != nil && *t.Topic == name {
			return t
		}
	}
	t := kmsg.NewMetadataResponseTopic()
	t.ErrorCode = kerr.UnknownTopicOrPartition.Code
	return t
}

// topicID is the topic's id as node id reports it.
func (c *cluster) topicID(ctx context.Context, id int) ([16]byte, error) {
	m, err := c.metadata(ctx, id)
	if err != nil {
		return [16]byte{}, err
	}
	return c.topicOf(m, c.topic).TopicID, nil
}

// metadata is node id's Metadata answer for the topic, which it must know (and,
// when coordinators are watched, for __transaction_state too).
func (c *cluster) metadata(ctx context.Context, id int) (*kmsg.MetadataResponse, error) {
	topics := []string{c.topic}
	if len(c.coordinators) > 0 {
		topics = append(topics, transactionTopic)
	}
	m, err := c.metadataOf(ctx, id, topics...)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(c.topicOf(m, c.topic).ErrorCode); err != nil {
		return nil, fmt.Errorf("node %d: topic %s: %w", id, c.topic, err)
	}
	return m, nil
}

// metadataOf is node id's Metadata answer for the topics.
func (c *cluster) metadataOf(ctx context.Context, id int, topics ...string) (*kmsg.MetadataResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, metadataRequestTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range topics {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	resp, err := c.probes[id-1].SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return nil, err
	}
	m := resp.(*kmsg.MetadataResponse)
	if len(m.Topics) != len(topics) {
		return nil, fmt.Errorf("node %d: metadata has %d topics, asked for %d", id, len(m.Topics), len(topics))
	}
	return m, nil
}

// agreed returns the leaders every node of ids reports, if they all answer and agree
// and no partition is led by node not.
func (c *cluster) agreed(ctx context.Context, ids []int, not int32) ([]leaderView, error) {
	var first []leaderView
	for _, id := range ids {
		v, err := c.view(ctx, id)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first = v
			continue
		}
		for p := range v {
			if v[p] != first[p] {
				return nil, fmt.Errorf("nodes disagree on %s: node %d says %v, node %d says %v",
					c.describe(p), ids[0], first[p], id, v[p])
			}
		}
	}
	for p, v := range first {
		if v.leader == not {
			return nil, fmt.Errorf("%s still led by node %d", c.describe(p), not)
		}
	}
	return first, nil
}

// waitAgreed polls agreed until it holds or timeout passes; the error then is the
// last reason it did not hold.
func (c *cluster) waitAgreed(ctx context.Context, ids []int, not int32, timeout time.Duration) ([]leaderView, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := c.agreed(ctx, ids, not)
		if err == nil {
			return v, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(probeInterval):
		}
	}
}

func (c *cluster) kill(ctx context.Context, id int) error {
	return c.run(ctx, killTimeout, "kill", id)
}

func (c *cluster) restart(ctx context.Context, id int) error {
	return c.run(ctx, restartTimeout, "restart", id)
}

func (c *cluster) pause(ctx context.Context, id int) error {
	return c.run(ctx, killTimeout, "pause", id)
}

func (c *cluster) resume(ctx context.Context, id int) error {
	return c.run(ctx, killTimeout, "resume", id)
}

func (c *cluster) run(ctx context.Context, timeout time.Duration, verb string, id int) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.script, verb, fmt.Sprint(id), c.dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cluster.sh %s %d: %w: %s", verb, id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nodeFile is the path of node id's pid or log file ("pid", "log"): keel.<ext> as
// compat/cluster.sh writes it, or kafka.<ext> for an Apache Kafka cluster started by
// compat/kafka/cluster.sh, the harness's reference broker.
func (c *cluster) nodeFile(id int, ext string) string {
	dir := filepath.Join(c.dir, fmt.Sprintf("node-%d", id))
	kafka := filepath.Join(dir, "kafka."+ext)
	if _, err := os.Stat(filepath.Join(dir, "server.properties")); err == nil {
		return kafka
	}
	return filepath.Join(dir, "keel."+ext)
}

// running reports whether node id's process is alive, from its pid file.
func (c *cluster) running(id int) bool {
	b, err := os.ReadFile(c.nodeFile(id, "pid"))
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join("/proc", strings.TrimSpace(string(b))))
	return err == nil
}

// logTails is the last n lines of every node's log, for evidence when the cluster
// misbehaves.
func (c *cluster) logTails(n int) string {
	var b strings.Builder
	for _, id := range c.nodes() {
		path := c.nodeFile(id, "log")
		data, err := os.ReadFile(path)
		fmt.Fprintf(&b, "--- node %d (%s)\n", id, path)
		if err != nil {
			fmt.Fprintf(&b, "(unreadable: %v)\n", err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		b.WriteString(strings.Join(lines, "\n"))
		b.WriteString("\n")
	}
	return b.String()
}

// createTopic creates the topic through the controller (kgo routes CreateTopics
// there), retrying while the controller moves or is not yet known.
func createTopic(ctx context.Context, cl *kgo.Client, topic string, parts int, rf int) error {
	deadline := time.Now().Add(createTopicTimeout)
	var last error
	for time.Now().Before(deadline) {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 10_000
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic = topic
		t.NumPartitions = int32(parts)
		t.ReplicationFactor = int16(rf)
		req.Topics = append(req.Topics, t)
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		resp, err := req.RequestWith(rctx, cl)
		cancel()
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
			if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
				return nil
			}
			if !kerr.IsRetriable(err) && !errors.Is(err, kerr.NotController) {
				return fmt.Errorf("create topic %s: %w", topic, err)
			}
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("create topic %s: no success in %v: %v", topic, createTopicTimeout, last)
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// The `-fault partition` mode: instead of killing the leader of partition 0, cut it
// off from every other node with the fault script (compat/faults/netns.sh isolate,
// nft rules in its network namespace) while the clients still reach it, hold the
// partition, then heal. Probes pinned to each node keep writing to the isolated
// leader the whole time.

// round is one partition and heal as the harness did it.
type round struct {
	n         int
	node      int32   // the isolated node: the leader of partition 0
	led       []int32 // the partitions it led at the cut
	ledEpochs []int32 // their leader epochs at the cut
	cut       time.Time
	electedIn time.Duration // until the other nodes agreed on new leaders (Metadata)
	newLeader []int32       // per led partition, the leader the other nodes elected
	newEpoch  []int32
	healAt    time.Time
	agreedIn  time.Duration // from the heal until every node agreed on the leaders
	tails     []tail        // per led partition
	probes    []probeResult
	err       string
}

// tail is the isolated node's log past the point where it parts from the new
// leader's, read from both nodes' segment files just before the heal, and what
// became of it.
type tail struct {
	partition   int32
	batches     []batchInfo // the isolated node's batches the new leader does not have
	end         int64       // the isolated node's log end offset before the heal
	truncatedIn time.Duration
	divergent   string // set if, after the wait, the two logs still differ below end
	behind      string // set if, after the wait, one log still did not reach end
}

const (
	probeLead        = 500 * time.Millisecond // probes run this long before the cut
	faultTimeout     = 10 * time.Second
	convergeTimeout  = 30 * time.Second
	convergeInterval = 200 * time.Millisecond
)

func partitionLeaders(ctx context.Context, c *cluster, cfg config, log io.Writer) ([]round, map[claim]time.Time, error) {
	s := startSampler(c)
	var rounds []round
	var err error
	for n := 1; n <= cfg.kills; n++ {
		var r round
		r, err = partitionOne(ctx, c, cfg, n)
		rounds = append(rounds, r)
		if err != nil {
			fmt.Fprintf(log, "partition: round %d/%d: %v\n", n, cfg.kills, err)
			break
		}
		fmt.Fprintf(log, "partition: round %d/%d: node %d (led %v, epochs %v) cut at %s; new leaders %v (epochs %v) after %v; healed at %s, agreed %v later; tails %s\n",
			n, cfg.kills, r.node, r.led, r.ledEpochs, r.cut.Format(timeFormat), r.newLeader, r.newEpoch,
			r.electedIn.Round(time.Millisecond), r.healAt.Format(timeFormat), r.agreedIn.Round(time.Millisecond), tailSummary(r.tails))
		if err = sleep(ctx, cfg.settle); err != nil {
			break
		}
	}
	return rounds, s.finish(), err
}

// partitionOne is one round. Its results are named: the deferred steps (probes'
// answers, the heal after a failure) fill in the round being returned.
func partitionOne(ctx context.Context, c *cluster, cfg config, n int) (r round, err error) {
	r = round{n: n}
	fail := func(format string, args ...any) (round, error) {
		r.err = fmt.Sprintf(format, args...)
		return r, fmt.Errorf("%s", r.err)
	}
	all := c.nodes()
	before, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout)
	if err != nil {
		return fail("cluster not settled before the cut: %v", err)
	}
	topicID, err := c.topicID(ctx, all[0])
	if err != nil {
		return fail("topic id: %v", err)
	}
	r.node = before[0].leader
	for p, v := range before {
		if v.leader == r.node {
			r.led = append(r.led, int32(p))
			r.ledEpochs = append(r.ledEpochs, v.epoch)
		}
	}
	pr := startProbes(c, topicID, n, r.led)
	defer func() { r.probes = pr.finish() }()
	if err := sleep(ctx, probeLead); err != nil {
		return r, err
	}

	r.cut = time.Now()
	if err := c.fault(ctx, "isolate", int(r.node), len(all)); err != nil {
		return fail("%v", err)
	}
	healed := false
	defer func() {
		if !healed {
			_ = c.fault(context.Background(), "heal", int(r.node), 0)
		}
	}()
	var others []int
	for _, id := range all {
		if id != int(r.node) {
			others = append(others, id)
		}
	}
	after, err := c.waitAgreed(ctx, others, r.node, cfg.waitTimeout)
	if err != nil {
		return fail("no new leader among nodes %v: %v", others, err)
	}
	r.electedIn = time.Since(r.cut)
	for j, p := range r.led {
		r.newLeader = append(r.newLeader, after[p].leader)
		r.newEpoch = append(r.newEpoch, after[p].epoch)
		if after[p].epoch <= r.ledEpochs[j] {
			return fail("partition %d: leader epoch %d after the cut, %d before", p, after[p].epoch, r.ledEpochs[j])
		}
	}
	if err := sleep(ctx, time.Until(r.cut.Add(cfg.hold))); err != nil {
		return r, err
	}
	for j, p := range r.led {
		t, err := c.snapshotTail(int(r.node), int(r.newLeader[j]), p)
		if err != nil {
			return fail("before the heal: %v", err)
		}
		r.tails = append(r.tails, t)
	}

	r.healAt = time.Now()
	if err := c.fault(ctx, "heal", int(r.node), 0); err != nil {
		return fail("%v", err)
	}
	healed = true
	if _, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout); err != nil {
		return fail("healed, but the nodes did not agree on leaders: %v", err)
	}
	r.agreedIn = time.Since(r.healAt)
	for j := range r.tails {
		c.awaitTruncated(ctx, int(r.node), int(r.newLeader[j]), &r.tails[j], r.healAt)
	}
	return r, nil
}

// fault runs the fault script: `isolate <node> <nodes>` or `heal <node>`.
func (c *cluster) fault(ctx context.Context, verb string, node, nodes int) error {
	args := []string{verb, fmt.Sprint(node)}
	if verb == "isolate" {
		args = append(args, fmt.Sprint(nodes))
	}
	return c.faultArgs(ctx, args...)
}

// faultArgs runs the fault script with args, bounded by faultTimeout.
func (c *cluster) faultArgs(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, faultTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.faultScript, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", c.faultScript, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// snapshotTail reads partition p from the isolated node's and the new leader's
// segment files and keeps the isolated node's batches past the first difference.
func (c *cluster) snapshotTail(isolated, leader int, p int32) (tail, error) {
	old, err := readSegments(partitionDir(c.dir, isolated, c.topic, p))
	if err != nil {
		return tail{}, err
	}
	cur, err := readSegments(partitionDir(c.dir, leader, c.topic, p))
	if err != nil {
		return tail{}, err
	}
	d := firstDifference(old, cur)
	return tail{partition: p, batches: append([]batchInfo(nil), old[d:]...), end: logEnd(old)}, nil
}

// awaitTruncated waits until the old leader's log below t.end equals the new
// leader's (both having reached t.end), and records how long that took, or what
// still differs when the wait ends.
func (c *cluster) awaitTruncated(ctx context.Context, old, leader int, t *tail, healAt time.Time) {
	deadline := time.Now().Add(convergeTimeout)
	for {
		a, errA := readSegments(partitionDir(c.dir, old, c.topic, t.partition))
		b, errB := readSegments(partitionDir(c.dir, leader, c.topic, t.partition))
		if errA == nil && errB == nil {
			pa, pb := prefixBefore(a, t.end), prefixBefore(b, t.end)
			d := firstDifference(pa, pb)
			switch {
			case d < len(pa) && d < len(pb):
				t.divergent = fmt.Sprintf("batch %d: node %d has %v, node %d has %v", d, old, pa[d], leader, pb[d])
				t.behind = ""
			case logEnd(a) < t.end || logEnd(b) < t.end || len(pa) != len(pb):
				t.divergent = ""
				t.behind = fmt.Sprintf("node %d ends at %d, node %d at %d, tail ended at %d", old, logEnd(a), leader, logEnd(b), t.end)
			default:
				t.divergent, t.behind = "", ""
				t.truncatedIn = time.Since(healAt)
				return
			}
		} else {
			t.behind = fmt.Sprintf("reading segments: %v / %v", errA, errB)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(convergeInterval)
	}
}

// replicasIdentical waits until every node holds the same batches of every
// partition; it returns the batch counts, or what differs when the wait ends and
// whether that is a divergence (not only a replica behind).
func (c *cluster) replicasIdentical(ctx context.Context) (map[int32]int, string, bool) {
	deadline := time.Now().Add(convergeTimeout)
	for {
		counts, diff, divergent := c.compareReplicas()
		if diff == "" || time.Now().After(deadline) || ctx.Err() != nil {
			return counts, diff, divergent
		}
		time.Sleep(convergeInterval)
	}
}

func (c *cluster) compareReplicas() (map[int32]int, string, bool) {
	counts := map[int32]int{}
	for p := int32(0); p < int32(c.parts); p++ {
		var first []batchInfo
		for _, id := range c.nodes() {
			bs, err := readSegments(partitionDir(c.dir, id, c.topic, p))
			if err != nil {
				return counts, err.Error(), false
			}
			if id == 1 {
				first = bs
				counts[p] = len(bs)
				continue
			}
			d := firstDifference(first, bs)
			if d < len(first) && d < len(bs) {
				return counts, fmt.Sprintf("p%d batch %d: node 1 has %v, node %d has %v", p, d, first[d], id, bs[d]), true
			}
			if len(first) != len(bs) {
				return counts, fmt.Sprintf("p%d: node 1 has %d batches, node %d has %d", p, len(first), id, len(bs)), false
			}
		}
	}
	return counts, "", false
}

func tailSummary(ts []tail) string {
	var parts []string
	for _, t := range ts {
		s := fmt.Sprintf("p%d: %d batches", t.partition, len(t.batches))
		if len(t.batches) > 0 {
			s += fmt.Sprintf(" [%d..%d] epochs %v", t.batches[0].base, logEnd(t.batches)-1, epochsOf(t.batches))
		}
		switch {
		case t.divergent != "":
			s += " NOT TRUNCATED: " + t.divergent
		case t.behind != "":
			s += " not caught up: " + t.behind
		default:
			s += fmt.Sprintf(" replaced in %v", t.truncatedIn.Round(time.Millisecond))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func epochsOf(bs []batchInfo) []int32 {
	var es []int32
	for _, b := range bs {
		if len(es) == 0 || es[len(es)-1] != b.epoch {
			es = append(es, b.epoch)
		}
	}
	return es
}

// partitionVerdict is what the rounds, the probes and the read-back say.
type partitionVerdict struct {
	lastAcks      []time.Duration // per round: cut to the isolated node's last acknowledgement
	lateAcks      []string        // rounds whose last acknowledgement came after the bound
	probeAcks     int
	probeLost     []string // probe acknowledgements whose record is not at its offset
	twoAckers     []string // (partition, epoch) acknowledged by more than one node
	twoLeaders    []string // (partition, epoch) claimed for more than one leader
	ackerNotLead  []string // acknowledged by a node no node named leader of that epoch
	tailBatches   int      // uncommitted batches found on isolated leaders
	tailRounds    int      // led partitions, over all rounds, where the isolated leader had an uncommitted tail
	notTruncated  []string
	notCaughtUp   []string
	isolatedEarly int // probe acknowledgements from the isolated node before the cut
	probeErrors   map[string]int
}

func (v partitionVerdict) failed() bool {
	return len(v.lateAcks)+len(v.probeLost)+len(v.twoAckers)+len(v.twoLeaders)+len(v.ackerNotLead)+len(v.notTruncated) > 0
}

// judgePartitions checks the rounds against the read-back and the leader claims.
func judgePartitions(rounds []round, logs map[int32][]logRecord, claims map[claim]time.Time, ackBound time.Duration) partitionVerdict {
	var v partitionVerdict
	type pe struct {
		partition int32
		epoch     int32
	}
	byOffset := map[int32]map[int64]logRecord{}
	for p, rs := range logs {
		byOffset[p] = map[int64]logRecord{}
		for _, r := range rs {
			byOffset[p][r.offset] = r
		}
	}
	ackers := map[pe]map[int]bool{}
	v.probeErrors = map[string]int{}
	for _, r := range rounds {
		var last time.Duration
		ledEpoch := map[int32]int32{}
		for j, p := range r.led {
			ledEpoch[p] = r.ledEpochs[j]
		}
		for _, pr := range r.probes {
			if pr.err != nil {
				v.probeErrors[pr.err.Error()]++
				continue
			}
			v.probeAcks++
			rec, ok := byOffset[pr.partition][pr.offset]
			// An acknowledgement from the isolated node counts against the bound
			// unless the log holds its record in an epoch after the one the node
			// led at the cut: a leadership it won back after the heal.
			regained := ok && rec.probe == pr.value && rec.epoch > ledEpoch[pr.partition]
			if pr.node == int(r.node) && !regained {
				if pr.at.After(r.cut) {
					last = max(last, pr.at.Sub(r.cut))
				} else {
					v.isolatedEarly++
				}
			}
			if !ok || rec.probe != pr.value {
				found := "nothing"
				if ok {
					found = fmt.Sprintf("%q", rec.probe)
				}
				v.probeLost = append(v.probeLost, fmt.Sprintf("round %d: node %d acknowledged %q at p%d@%d (%s after the cut); the log holds %s there",
					r.n, pr.node, pr.value, pr.partition, pr.offset, pr.at.Sub(r.cut).Round(time.Millisecond), found))
				continue
			}
			k := pe{pr.partition, rec.epoch}
			if ackers[k] == nil {
				ackers[k] = map[int]bool{}
			}
			ackers[k][pr.node] = true
		}
		if r.err == "" {
			v.lastAcks = append(v.lastAcks, last)
			if last > ackBound {
				v.lateAcks = append(v.lateAcks, fmt.Sprintf("round %d: node %d acknowledged %v after the cut (bound %v)", r.n, r.node, last.Round(time.Millisecond), ackBound))
			}
		}
		for _, t := range r.tails {
			if len(t.batches) > 0 {
				v.tailRounds++
				v.tailBatches += len(t.batches)
			}
			if t.divergent != "" {
				v.notTruncated = append(v.notTruncated, fmt.Sprintf("round %d p%d: %s", r.n, t.partition, t.divergent))
			} else if t.behind != "" {
				v.notCaughtUp = append(v.notCaughtUp, fmt.Sprintf("round %d p%d: %s", r.n, t.partition, t.behind))
			}
		}
	}
	leaders := map[pe]map[int32]bool{}
	for cl := range claims {
		k := pe{cl.partition, cl.epoch}
		if leaders[k] == nil {
			leaders[k] = map[int32]bool{}
		}
		leaders[k][cl.leader] = true
	}
	for k, ns := range ackers {
		if len(ns) > 1 {
			v.twoAckers = append(v.twoAckers, fmt.Sprintf("p%d epoch %d acknowledged by nodes %v", k.partition, k.epoch, keys(ns)))
		}
		for n := range ns {
			if ls, ok := leaders[k]; ok && !ls[int32(n)] {
				v.ackerNotLead = append(v.ackerNotLead, fmt.Sprintf("p%d epoch %d: node %d acknowledged, Metadata named %v leader", k.partition, k.epoch, n, keys(ls)))
			}
		}
	}
	for k, ls := range leaders {
		if len(ls) > 1 {
			v.twoLeaders = append(v.twoLeaders, fmt.Sprintf("p%d epoch %d led by %v", k.partition, k.epoch, keys(ls)))
		}
	}
	sort.Strings(v.twoAckers)
	sort.Strings(v.twoLeaders)
	sort.Strings(v.ackerNotLead)
	return v
}

func keys[K int | int32](m map[K]bool) []K {
	var out []K
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// printRounds prints one line per round: the cut, the isolated node's last
// acknowledgement, the election, the client's failover (from the ledger's own
// measure), the heal, and what became of the tail.
func printRounds(w io.Writer, rounds []round, kills []kill, ackBound time.Duration) {
	fmt.Fprintln(w, "round  node  led     last_ack_ms  refused_ms  elected_ms  client_failover_ms  gap_ms  healed_agreed_ms  tail")
	for i, r := range rounds {
		var last time.Duration
		refused := "-"
		var firstRefusal time.Time
		for _, pr := range r.probes {
			if pr.node != int(r.node) || !pr.at.After(r.cut) {
				continue
			}
			if pr.err == nil {
				last = max(last, pr.at.Sub(r.cut))
			} else if pr.sent.After(r.cut) && (firstRefusal.IsZero() || pr.at.Before(firstRefusal)) {
				firstRefusal = pr.at
			}
		}
		if !firstRefusal.IsZero() {
			refused = ms(firstRefusal.Sub(r.cut))
		}
		failover := ms(kills[i].failover)
		if kills[i].noFailover {
			failover = "none"
		}
		led := strings.Trim(fmt.Sprint(r.led), "[]")
		fmt.Fprintf(w, "%5d  %4d  %-6s  %11s  %10s  %10s  %18s  %6s  %16s  %s\n",
			r.n, r.node, led, ms(last), refused, ms(r.electedIn), failover, ms(kills[i].gap), ms(r.agreedIn), tailSummary(r.tails))
		if r.err != "" {
			fmt.Fprintf(w, "       error: %s\n", r.err)
		}
	}
	fmt.Fprintf(w, "(last_ack_ms: cut to the isolated leader's last acknowledged probe, bound %v; refused_ms: cut to its first\n"+
		" refusal of a probe sent after the cut, i.e. when it stopped holding writes it could not commit)\n", ackBound)
}

// roundsAsKills lets the ledger's own measure (client failover by leader epoch,
// acknowledgement gaps) run over the rounds: a cut stands for a kill.
func roundsAsKills(rounds []round, stoppedAt time.Time) []kill {
	kills := make([]kill, len(rounds))
	for i, r := range rounds {
		kills[i] = kill{n: r.n, node: r.node, led: r.led, ledEpochs: r.ledEpochs, at: r.cut, electedIn: r.electedIn, err: r.err}
		if len(r.ledEpochs) > 0 {
			kills[i].epoch = r.ledEpochs[0]
		}
		kills[i].windowEnd = stoppedAt
		if i+1 < len(rounds) {
			kills[i].windowEnd = rounds[i+1].cut
		}
	}
	return kills
}

// writeProbeLog writes every probe as a tab-separated line: round, node, partition,
// sent and answered relative to the round's cut (ms), offset, answer.
func writeProbeLog(path string, rounds []round) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "round\tnode\tisolated\tpartition\tsent_ms\tanswered_ms\toffset\tanswer\tvalue")
	for _, r := range rounds {
		for _, pr := range r.probes {
			answer := "ack"
			if pr.err != nil {
				answer = pr.err.Error()
			}
			fmt.Fprintf(w, "%d\t%d\t%v\t%d\t%d\t%d\t%d\t%s\t%s\n", r.n, pr.node, pr.node == int(r.node), pr.partition,
				pr.sent.Sub(r.cut).Milliseconds(), pr.at.Sub(r.cut).Milliseconds(), pr.offset, answer, pr.value)
		}
	}
	return w.Flush()
}

// reportPartitions prints the partition findings and the summary line.
func reportPartitions(w io.Writer, v partitionVerdict, ackBound time.Duration, replicaCounts map[int32]int, replicaDiff string) {
	for _, group := range []struct {
		label string
		items []string
	}{
		{"ACKNOWLEDGED AFTER THE BOUND", v.lateAcks},
		{"PROBE ACKNOWLEDGEMENT LOST", v.probeLost},
		{"TWO NODES ACKNOWLEDGED IN ONE EPOCH", v.twoAckers},
		{"TWO LEADERS CLAIMED FOR ONE EPOCH", v.twoLeaders},
		{"ACKNOWLEDGED BY A NODE NOT NAMED LEADER", v.ackerNotLead},
		{"TAIL NOT TRUNCATED", v.notTruncated},
		{"tail not caught up in time", v.notCaughtUp},
	} {
		if len(group.items) > 0 {
			fmt.Fprintf(w, "%s: %s\n", group.label, sample(group.items, 10))
		}
	}
	if replicaDiff != "" {
		fmt.Fprintf(w, "replicas differ at the end: %s\n", replicaDiff)
	}
	var errs []string
	for e, n := range v.probeErrors {
		errs = append(errs, fmt.Sprintf("%dx %s", n, e))
	}
	sort.Strings(errs)
	fmt.Fprintf(w, "probe answers other than an acknowledgement (expected from followers and from a leader that lost its quorum): %s\n", sample(errs, 8))
	if v.isolatedEarly == 0 {
		fmt.Fprintln(w, "warning: no probe was acknowledged by a leader before its cut: check 1 saw nothing to stop")
	}
	if v.tailRounds == 0 {
		fmt.Fprintln(w, "warning: no isolated leader had an uncommitted tail: the truncation check had nothing to check")
	}
	lastMed, lastMax := stats(v.lastAcks)
	identical := "yes"
	if replicaDiff != "" {
		identical = "no"
	}
	fmt.Fprintf(w, "partition: rounds=%d last_ack_after_cut_ms median=%s max=%s bound=%s probe_acks=%d probe_lost=%d two_ackers_one_epoch=%d two_leaders_one_epoch=%d uncommitted_tails=%d batches=%d not_truncated=%d replicas_identical=%s batches_per_partition=%v\n",
		len(v.lastAcks), lastMed, lastMax, ms(ackBound), v.probeAcks, len(v.probeLost), len(v.twoAckers), len(v.twoLeaders),
		v.tailRounds, v.tailBatches, len(v.notTruncated), identical, replicaCounts)
}

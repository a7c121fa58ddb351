package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Fault rounds applied to every node at once or to partition 0's leader, held, then
// undone. What a round measures is whether writes keep being acknowledged through it
// (on any partition) and how soon after it ends they are again; the ledger's checks
// (nothing acknowledged lost, duplicated or reordered) judge the data as in the other
// modes. `-fault mixed` deals each round's class from kill, pause, crash-all, power,
// skew, partition, drop, disk-full, bitflip, cut and step (see mixedClasses), kill, pause
// and partition acting on the leader as in killLeaders and partitionRound; disk-full,
// bitflip and step are in disk.go.
//
//   - `-fault drop`: each round draws a loss rate from dropPercentMin..dropPercentMax
//     (seeded by -seed) and has the fault script drop that share of each node's packets
//     in and out (compat/faults/netns.sh drop: nodes and clients alike) for -hold, then
//     heals every node.
//   - `-fault crash-all`: every node is killed with SIGKILL at once, as a power cut of
//     the whole cluster that spares only what each node fsynced, stays down for -down,
//     and every node is restarted.
//   - `-fault power`: as crash-all, and before the restart each node's files are cut
//     back to what its fsyncs made durable, with torn tails (power.go).
//   - `-fault skew`: the leader of partition 0 is killed with SIGKILL and, after -down,
//     restarted with its wall clock set off by a new offset within ±skewSecondsMax
//     (seeded by -seed), as a host whose clock is wrong or was stepped while it was
//     down. The nodes run under libfaketime with the offset in node-<i>/faketime
//     (compat/keel.sh; started by compat/ledger/run.sh --skew); monotonic clocks are
//     left alone. The nodes' clocks disagree by up to 20 minutes, and leadership moves
//     between them.

const (
	dropPercentMin = 5
	dropPercentMax = 20
	// progressBound is how soon after a round ends some record must be acknowledged again.
	progressBound = 10 * time.Second
	// skewSecondsMax bounds the wall-clock offsets of -fault skew.
	skewSecondsMax = 600
)

// faultRound is one round: what was done, and when it started and ended.
type faultRound struct {
	n      int
	class  string // kill, pause, crash-all, power, skew, partition, drop, disk-full, bitflip, cut or step
	what   string // "13% loss on every node", "node 2 paused", ...
	at     time.Time
	healed time.Time     // the fault's end: the heal or the first restart issued
	backIn time.Duration // from healed until every node agreed on the leaders
	err    string
	// With disk-full: the partitions the full node led, whose acknowledgements alone
	// count for progressIn and partGap, and the bound on progressIn (else progressBound).
	parts []int32
	bound time.Duration
	// With disk-full: how soon after the removal the node's segment files held what
	// the others' held then; the partitions whose files did not within writtenOutBound.
	writtenOutIn time.Duration
	stalled      []int32
	// With bitflip: how soon after the restart the node found the damage; whether it
	// did not within damageFoundBound; whether the damaged node led partition 0; how
	// soon after it was found it was rebuilt, or that it was not within rebuildBound.
	foundIn       time.Duration
	undetected    bool
	damagedLeader bool
	rebuiltIn     time.Duration
	notRebuilt    bool
	// With cut: the cut lay above the node's last checkpoint, and its journal wrote
	// it again (not damage).
	rewritten bool
	// Filled from the acknowledgements after the run.
	ackedDuring int           // records acknowledged from the start until healed
	gap         time.Duration // longest time without an acknowledgement, from the start until the next round
	progressIn  time.Duration // from healed to the first acknowledgement after it
	noProgress  bool          // nothing acknowledged after healed before the next round
	partGap     time.Duration // with parts: longestGap over those partitions alone
	windowEnd   time.Time
}

// mixedClasses is what `-fault mixed` draws from: leader kills and pauses and
// whole-cluster kills; clock skew when the nodes run under libfaketime (-mixed-skew);
// the leader cut off from its peers, the leader and one follower cut apart (the third
// node a bridge between them), the leader cut off from the clients, and random packet
// loss when the nodes run in network namespaces that the fault script can cut
// (-mixed-net, compat/faults/soak.sh --netns); whole-cluster power cuts when the nodes note their fsyncs (-mixed-power,
// power.go); a leader's disk filled when every node's data directory is a file system
// of its own (-mixed-disk); bits flipped in a stopped follower's segments
// (-mixed-bitflip); the leader's wall clock stepped while it runs (-mixed-step, under
// libfaketime).
func mixedClasses(cfg config) []string {
	classes := []string{"kill", "pause", "crash-all"}
	if cfg.mixedSkew {
		classes = append(classes, "skew")
	}
	if cfg.mixedNet {
		classes = append(classes, "partition", "bridge", "client-cut", "drop")
	}
	if cfg.mixedPower {
		classes = append(classes, "power")
	}
	if cfg.mixedDisk {
		classes = append(classes, "disk-full")
	}
	if cfg.mixedBitflip {
		classes = append(classes, "bitflip", "cut")
	}
	if cfg.mixedStep {
		classes = append(classes, "step")
	}
	return classes
}

// clusterRounds runs cfg.kills rounds of cfg.fault, each class drawn per round with
// -fault mixed.
func clusterRounds(ctx context.Context, c *cluster, cfg config, log io.Writer) ([]faultRound, error) {
	rng := rand.New(rand.NewPCG(cfg.seed, 0xd509))
	if cfg.fault != "crash-all" {
		fmt.Fprintf(log, "ledger: %s rounds: drawn with -seed %d\n", cfg.fault, cfg.seed)
	}
	var rounds []faultRound
	all := c.nodes()
	everyNode := func([]leaderView) []int { return all }
	classes := mixedClasses(cfg)
	// Mixed rounds deal the classes from a shuffled deck, dealt again when empty: every
	// class comes once in each len(classes) rounds, so a short run still meets them all.
	var deck []string
	started := time.Now()
	more := func(n int) bool {
		if cfg.duration > 0 {
			return time.Since(started) < cfg.duration
		}
		return n <= cfg.kills
	}
	total := fmt.Sprint(cfg.kills)
	if cfg.duration > 0 {
		total = "(for " + cfg.duration.String() + ")"
	}
	for n := 1; more(n); n++ {
		class := cfg.fault
		if class == "mixed" {
			if len(deck) == 0 {
				deck = append(deck, classes...)
				rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
			}
			class, deck = deck[0], deck[1:]
		}
		r := faultRound{n: n, class: class}
		leader := func(view []leaderView) []int { return []int{int(view[0].leader)} }
		var err error
		switch class {
		case "drop":
			percent := dropPercentMin + rng.IntN(dropPercentMax-dropPercentMin+1)
			r.what = fmt.Sprintf("%d%% loss on every node", percent)
			err = clusterRound(ctx, c, cfg, everyNode, &r, func(id int) error {
				return c.faultArgs(ctx, "drop", fmt.Sprint(id), fmt.Sprint(percent))
			}, cfg.hold, func(undo context.Context, id int) error { return c.faultArgs(undo, "heal", fmt.Sprint(id)) })
		case "partition": // only drawn by -fault mixed; -fault partition runs partitionRound
			err = clusterRound(ctx, c, cfg, leader, &r, func(id int) error {
				r.what = fmt.Sprintf("node %d cut off", id)
				return c.fault(ctx, "isolate", id, len(all))
			}, cfg.hold, func(undo context.Context, id int) error { return c.fault(undo, "heal", id, 0) })
		case "bridge": // the leader and one follower cut apart; the third node reaches both
			other := 0
			err = clusterRound(ctx, c, cfg, leader, &r, func(id int) error {
				for other == 0 || other == id {
					other = all[rng.IntN(len(all))]
				}
				r.what = fmt.Sprintf("nodes %d and %d cut apart", id, other)
				return c.faultArgs(ctx, "sever", fmt.Sprint(id), fmt.Sprint(other))
			}, cfg.hold, func(undo context.Context, id int) error {
				return errors.Join(c.fault(undo, "heal", id, 0), c.fault(undo, "heal", other, 0))
			})
		case "client-cut": // the clients cannot reach the leader; its peers can
			err = clusterRound(ctx, c, cfg, leader, &r, func(id int) error {
				r.what = fmt.Sprintf("node %d cut off from the clients", id)
				return c.faultArgs(ctx, "cut-clients", fmt.Sprint(id))
			}, cfg.hold, func(undo context.Context, id int) error { return c.fault(undo, "heal", id, 0) })
		case "skew":
			offset := rng.IntN(2*skewSecondsMax+1) - skewSecondsMax
			err = clusterRound(ctx, c, cfg, leader, &r, func(id int) error {
				r.what = fmt.Sprintf("node %d at %+ds", id, offset)
				if err := c.kill(ctx, id); err != nil {
					return err
				}
				return c.skew(id, offset)
			}, cfg.down, c.restart)
		case "kill":
			err = clusterRound(ctx, c, cfg, leader, &r, func(id int) error {
				r.what = fmt.Sprintf("node %d killed", id)
				return c.kill(ctx, id)
			}, cfg.down, c.restart)
		case "pause":
			err = clusterRound(ctx, c, cfg, leader, &r, func(id int) error {
				r.what = fmt.Sprintf("node %d paused", id)
				return c.pause(ctx, id)
			}, cfg.down, c.resume)
		case "power":
			seeds := map[int]uint64{}
			for _, id := range all {
				seeds[id] = rng.Uint64()
			}
			var mu sync.Mutex
			var total powerCutStats
			err = clusterRound(ctx, c, cfg, everyNode, &r, func(id int) error { return c.kill(ctx, id) }, cfg.down,
				func(undo context.Context, id int) error {
					st, err := c.powerCut(id, rand.New(rand.NewPCG(seeds[id], 0)))
					mu.Lock()
					total.files, total.damaged, total.bytesCut = total.files+st.files, total.damaged+st.damaged, total.bytesCut+st.bytesCut
					mu.Unlock()
					if err != nil {
						return err
					}
					return c.restart(undo, id)
				})
			r.what = fmt.Sprintf("power cut: %d of %d files torn, %d KiB cut", total.damaged, total.files, total.bytesCut>>10)
		case "disk-full":
			err = diskFullRound(ctx, c, cfg, &r)
		case "bitflip":
			err = damageRound(ctx, c, cfg, &r, rand.New(rand.NewPCG(rng.Uint64(), 0)), (*cluster).flipBits)
		case "cut":
			err = damageRound(ctx, c, cfg, &r, rand.New(rand.NewPCG(rng.Uint64(), 0)), (*cluster).cutShort)
		case "step":
			err = stepRound(ctx, c, cfg, &r, rng.IntN(2*stepSecondsMax+1)-stepSecondsMax)
		default: // crash-all
			r.what = "every node killed"
			err = clusterRound(ctx, c, cfg, everyNode, &r, func(id int) error { return c.kill(ctx, id) }, cfg.down, c.restart)
		}
		if err != nil {
			r.err = err.Error()
		}
		rounds = append(rounds, r)
		if err != nil {
			fmt.Fprintf(log, "ledger: %s round %d/%s: %v\n", cfg.fault, n, total, err)
			return rounds, err
		}
		fmt.Fprintf(log, "ledger: %s round %d/%s: %s, from %s until %s; leaders agreed %v after\n",
			cfg.fault, n, total, r.what, r.at.Format(timeFormat), r.healed.Format(timeFormat), r.backIn.Round(time.Millisecond))
		settle := cfg.settle
		if class == "client-cut" {
			// The clients' connections to the cut node back off their retransmissions
			// (a few seconds after a 4-s cut): the round keeps its whole progress
			// window, rather than the next fault starting before they are back.
			settle = max(settle, progressBound)
		}
		if err := sleep(ctx, settle); err != nil {
			return rounds, err
		}
	}
	return rounds, nil
}

// clusterRound waits for the cluster to agree on leaders, applies the fault to the
// nodes targets picks from that view, holds it, and undoes it on all of them at once
// whatever happened, so the read-back finds a whole cluster.
func clusterRound(ctx context.Context, c *cluster, cfg config, targets func([]leaderView) []int, r *faultRound,
	apply func(id int) error, hold time.Duration, undo func(ctx context.Context, id int) error) error {
	all := c.nodes()
	view, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout)
	if err != nil {
		return fmt.Errorf("cluster not settled before the round: %w", err)
	}
	hit := targets(view)
	r.at = time.Now()
	var faultErr error
	for _, id := range hit {
		if faultErr = apply(id); faultErr != nil {
			break
		}
	}
	if faultErr == nil {
		faultErr = sleep(ctx, time.Until(r.at.Add(hold)))
	}
	r.healed = time.Now()
	undoCtx, cancel := context.WithTimeout(context.Background(), restartTimeout)
	defer cancel()
	// Every node at once, as power coming back starts every machine together.
	undone := make(chan error, len(hit))
	for _, id := range hit {
		go func() { undone <- undo(undoCtx, id) }()
	}
	for range hit {
		if err := <-undone; err != nil && faultErr == nil {
			faultErr = err
		}
	}
	if faultErr != nil {
		return faultErr
	}
	if _, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout); err != nil {
		return fmt.Errorf("fault undone, but the cluster did not agree on leaders: %w", err)
	}
	r.backIn = time.Since(r.healed)
	return nil
}

// measureRounds fills each round's figures from the acknowledgements.
func measureRounds(rounds []faultRound, acks []ack, stoppedAt time.Time) {
	all := ackTimes(acks, nil)
	for i := range rounds {
		r := &rounds[i]
		r.windowEnd = stoppedAt
		if i+1 < len(rounds) {
			r.windowEnd = rounds[i+1].at
		}
		r.gap = longestGap(all, r.at, r.windowEnd)
		from := sort.Search(len(all), func(j int) bool { return !all[j].Before(r.at) })
		healed := sort.Search(len(all), func(j int) bool { return !all[j].Before(r.healed) })
		r.ackedDuring = healed - from
		ts := all
		if r.parts != nil {
			ts = ackTimes(acks, r.parts)
			r.partGap = longestGap(ts, r.at, r.windowEnd)
			healed = sort.Search(len(ts), func(j int) bool { return !ts[j].Before(r.healed) })
		}
		if healed < len(ts) && ts[healed].Before(r.windowEnd) {
			r.progressIn = ts[healed].Sub(r.healed)
		} else {
			r.noProgress = true
		}
	}
}

// printClusterRounds prints the rounds, a summary per class when classes were mixed,
// and returns whether a round failed a check: no acknowledgement within progressBound
// of its end (within diskFreedBound of freeing a full disk, on the partitions the
// node led), flipped bits the node did not find, or a damaged replica leading.
func printClusterRounds(w io.Writer, fault string, rounds []faultRound) bool {
	fmt.Fprintln(w, "round  fault                     acked_during  gap_ms  progress_ms  back_ms")
	var gaps, progress []time.Duration
	slow := false
	for _, r := range rounds {
		p := ms(r.progressIn)
		if r.noProgress {
			p = "none"
		}
		fmt.Fprintf(w, "%5d  %-24s  %12d  %6s  %11s  %7s\n", r.n, r.what, r.ackedDuring, ms(r.gap), p, ms(r.backIn))
		if r.err != "" {
			fmt.Fprintf(w, "       error: %s\n", r.err)
		}
		gaps = append(gaps, r.gap)
		progress = append(progress, r.progressIn)
		bound := progressBound
		if r.bound > 0 {
			bound = r.bound
		}
		if r.noProgress || r.progressIn > bound {
			slow = true
			fmt.Fprintf(w, "LIVENESS: round %d had no acknowledgement within %v of its end\n", r.n, bound)
		}
		switch {
		case r.class == "disk-full" && len(r.stalled) > 0:
			slow = true
			fmt.Fprintf(w, "SEGMENTS NOT WRITTEN: round %d: the node's segment files of partitions %v did not catch up within %v of freeing its disk (node restarted)\n",
				r.n, r.stalled, writtenOutBound)
		case r.class == "disk-full":
			fmt.Fprintf(w, "       partitions %v: longest gap %s ms, first acknowledgement %s ms after the disk was freed (bound %v); segment files caught up in %s ms\n",
				r.parts, ms(r.partGap), p, bound, ms(r.writtenOutIn))
		case r.class == "cut" && r.rewritten:
			fmt.Fprintf(w, "       cut above the node's last checkpoint: written again from its journal (no damage)\n")
		case (r.class == "bitflip" || r.class == "cut") && r.undetected:
			slow = true
			fmt.Fprintf(w, "DAMAGE NOT FOUND: round %d: the node did not report the flipped bits within %v\n", r.n, damageFoundBound)
		case (r.class == "bitflip" || r.class == "cut") && r.notRebuilt:
			slow = true
			fmt.Fprintf(w, "NOT REBUILT: round %d: the damaged replica was not rebuilt within %v of being found\n", r.n, rebuildBound)
		case r.class == "bitflip" || r.class == "cut":
			fmt.Fprintf(w, "       damage found %s ms after the restart, replica rebuilt %s ms later\n", ms(r.foundIn), ms(r.rebuiltIn))
		}
		if r.damagedLeader {
			slow = true
			fmt.Fprintf(w, "DAMAGED REPLICA LED: round %d: the damaged node led partition 0\n", r.n)
		}
	}
	byClass := map[string][]faultRound{}
	for _, r := range rounds {
		byClass[r.class] = append(byClass[r.class], r)
	}
	if len(byClass) > 1 {
		for _, class := range []string{"kill", "pause", "crash-all", "power", "skew", "partition", "bridge", "client-cut", "drop", "disk-full", "bitflip", "cut", "step"} {
			var cg, cp, cf, cr []time.Duration
			for _, r := range byClass[class] {
				cg, cp, cf, cr = append(cg, r.gap), append(cp, r.progressIn), append(cf, r.foundIn), append(cr, r.rebuiltIn)
			}
			if len(cg) == 0 {
				continue
			}
			gm, gx := stats(cg)
			pm, px := stats(cp)
			extra := ""
			switch class {
			case "disk-full":
				extra = fmt.Sprintf(" (the full node's partitions; bound %v)", diskFreedBound)
			case "bitflip", "cut":
				fm, fx := stats(cf)
				rm, rx := stats(cr)
				extra = fmt.Sprintf(" found_ms p50=%s max=%s rebuilt_ms p50=%s max=%s", fm, fx, rm, rx)
			}
			fmt.Fprintf(w, "class %-9s rounds=%d gap_ms p50=%s max=%s progress_ms p50=%s max=%s%s\n", class, len(cg), gm, gx, pm, px, extra)
		}
	}
	gapMed, gapMax := stats(gaps)
	progMed, progMax := stats(progress)
	fmt.Fprintf(w, "%s rounds: %d; longest gap without an acknowledgement p50 %s ms, max %s ms; first acknowledgement after the round p50 %s ms, max %s ms (bound %v)\n",
		fault, len(rounds), gapMed, gapMax, progMed, progMax, progressBound)
	return slow
}

// skew sets node id's wall-clock offset for libfaketime: its node-<id>/faketime file,
// replaced whole so the broker never reads half a line.
func (c *cluster) skew(id, seconds int) error {
	path := filepath.Join(c.dir, fmt.Sprintf("node-%d", id), "faketime")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%+d\n", seconds)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"time"
)

// Whole-cluster fault rounds: a fault applied to every node at once, held, then undone.
// Nothing is aimed at a leader, so leaders may or may not change; what a round measures
// is whether writes keep being acknowledged through it and how soon after it ends they
// are again. The ledger's checks (nothing acknowledged lost, duplicated or reordered)
// judge the data as in the other modes.
//
//   - `-fault drop`: each round draws a loss rate from dropPercentMin..dropPercentMax
//     (seeded by -seed) and has the fault script drop that share of each node's packets
//     in and out (compat/faults/netns.sh drop: nodes and clients alike) for -hold, then
//     heals every node.
//   - `-fault crash-all`: every node is killed with SIGKILL at once, as a power cut of
//     the whole cluster that spares only what each node fsynced, stays down for -down,
//     and every node is restarted.

const (
	dropPercentMin = 5
	dropPercentMax = 20
	// progressBound is how soon after a round ends some record must be acknowledged again.
	progressBound = 10 * time.Second
)

// faultRound is one round: what was done, and when it started and ended.
type faultRound struct {
	n      int
	what   string // "13% loss", "all killed"
	at     time.Time
	healed time.Time     // the fault's end: the heal or the first restart issued
	backIn time.Duration // from healed until every node agreed on the leaders
	err    string
	// Filled from the acknowledgements after the run.
	ackedDuring int           // records acknowledged from the start until healed
	gap         time.Duration // longest time without an acknowledgement, from the start until the next round
	progressIn  time.Duration // from healed to the first acknowledgement after it
	noProgress  bool          // nothing acknowledged after healed before the next round
	windowEnd   time.Time
}

// clusterRounds runs cfg.kills rounds of the whole-cluster fault cfg.fault.
func clusterRounds(ctx context.Context, c *cluster, cfg config, log io.Writer) ([]faultRound, error) {
	rng := rand.New(rand.NewPCG(cfg.seed, 0xd509))
	if cfg.fault == "drop" {
		fmt.Fprintf(log, "ledger: drop rounds: loss rates drawn with -seed %d\n", cfg.seed)
	}
	var rounds []faultRound
	all := c.nodes()
	for n := 1; n <= cfg.kills; n++ {
		r := faultRound{n: n}
		var err error
		if cfg.fault == "drop" {
			percent := dropPercentMin + rng.IntN(dropPercentMax-dropPercentMin+1)
			r.what = fmt.Sprintf("%d%% loss", percent)
			err = clusterRound(ctx, c, cfg, all, &r, func(id int) error {
				return c.faultArgs(ctx, "drop", fmt.Sprint(id), fmt.Sprint(percent))
			}, cfg.hold, func(undo context.Context, id int) error { return c.faultArgs(undo, "heal", fmt.Sprint(id)) })
		} else {
			r.what = "all killed"
			err = clusterRound(ctx, c, cfg, all, &r, func(id int) error { return c.kill(ctx, id) }, cfg.down, c.restart)
		}
		if err != nil {
			r.err = err.Error()
		}
		rounds = append(rounds, r)
		if err != nil {
			fmt.Fprintf(log, "ledger: %s round %d/%d: %v\n", cfg.fault, n, cfg.kills, err)
			return rounds, err
		}
		fmt.Fprintf(log, "ledger: %s round %d/%d: %s on every node from %s until %s; leaders agreed %v after\n",
			cfg.fault, n, cfg.kills, r.what, r.at.Format(timeFormat), r.healed.Format(timeFormat), r.backIn.Round(time.Millisecond))
		if err := sleep(ctx, cfg.settle); err != nil {
			return rounds, err
		}
	}
	return rounds, nil
}

// clusterRound applies the fault to every node, holds it, and undoes it on every node
// whatever happened, so the read-back finds a whole cluster.
func clusterRound(ctx context.Context, c *cluster, cfg config, all []int, r *faultRound,
	apply func(id int) error, hold time.Duration, undo func(ctx context.Context, id int) error) error {
	if _, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout); err != nil {
		return fmt.Errorf("cluster not settled before the round: %w", err)
	}
	r.at = time.Now()
	var faultErr error
	for _, id := range all {
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
	for _, id := range all {
		if err := undo(undoCtx, id); err != nil && faultErr == nil {
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
		if healed < len(all) && all[healed].Before(r.windowEnd) {
			r.progressIn = all[healed].Sub(r.healed)
		} else {
			r.noProgress = true
		}
	}
}

// printRounds prints the rounds and returns whether a round broke a liveness bound:
// no acknowledgement within progressBound of its end.
func printClusterRounds(w io.Writer, fault string, rounds []faultRound) bool {
	fmt.Fprintln(w, "round  fault       acked_during  gap_ms  progress_ms  back_ms")
	var gaps, progress []time.Duration
	slow := false
	for _, r := range rounds {
		p := ms(r.progressIn)
		if r.noProgress {
			p = "none"
		}
		fmt.Fprintf(w, "%5d  %-10s  %12d  %6s  %11s  %7s\n", r.n, r.what, r.ackedDuring, ms(r.gap), p, ms(r.backIn))
		if r.err != "" {
			fmt.Fprintf(w, "       error: %s\n", r.err)
		}
		gaps = append(gaps, r.gap)
		progress = append(progress, r.progressIn)
		if r.noProgress || r.progressIn > progressBound {
			slow = true
		}
	}
	gapMed, gapMax := stats(gaps)
	progMed, progMax := stats(progress)
	fmt.Fprintf(w, "%s rounds: %d; longest gap without an acknowledgement p50 %s ms, max %s ms; first acknowledgement after the round p50 %s ms, max %s ms (bound %v)\n",
		fault, len(rounds), gapMed, gapMax, progMed, progMax, progressBound)
	if slow {
		fmt.Fprintf(w, "LIVENESS: a round had no acknowledgement within %v of its end\n", progressBound)
	}
	return slow
}

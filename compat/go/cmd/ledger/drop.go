package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"time"
)

// The `-fault drop` mode: rounds of random packet loss on every node at once. Each
// round draws a loss rate from dropPercentMin..dropPercentMax (seeded by -seed), has
// the fault script drop that share of each node's packets in and out (compat/faults/
// netns.sh drop: nodes and clients alike) for -hold, then heals every node. Nothing is
// killed, so leaders may or may not change; what the round measures is whether writes
// keep being acknowledged through the loss and how soon after the heal they are again.
// The ledger's checks (nothing acknowledged lost, duplicated or reordered) judge the
// data as in the other modes.

const (
	dropPercentMin = 5
	dropPercentMax = 20
	// progressBound is how soon after a heal some record must be acknowledged again.
	progressBound = 10 * time.Second
)

// dropRound is one round: the loss rate and when it started and was healed.
type dropRound struct {
	n       int
	percent int
	at      time.Time
	healed  time.Time
	backIn  time.Duration // from the heal until every node agreed on the leaders
	err     string
	// Filled from the acknowledgements after the run.
	ackedDuring int           // records acknowledged while the loss lasted
	gap         time.Duration // longest time without an acknowledgement, from the start until the next round
	progressIn  time.Duration // from the heal to the first acknowledgement after it
	noProgress  bool          // nothing acknowledged after the heal before the next round
	windowEnd   time.Time
}

func dropRounds(ctx context.Context, c *cluster, cfg config, log io.Writer) ([]dropRound, error) {
	rng := rand.New(rand.NewPCG(cfg.seed, 0xd509))
	fmt.Fprintf(log, "ledger: drop rounds: loss rates drawn with -seed %d\n", cfg.seed)
	var rounds []dropRound
	all := c.nodes()
	for n := 1; n <= cfg.kills; n++ {
		r := dropRound{n: n, percent: dropPercentMin + rng.IntN(dropPercentMax-dropPercentMin+1)}
		err := dropOne(ctx, c, cfg, all, &r)
		if err != nil {
			r.err = err.Error()
		}
		rounds = append(rounds, r)
		if err != nil {
			fmt.Fprintf(log, "ledger: drop round %d/%d: %v\n", n, cfg.kills, err)
			return rounds, err
		}
		fmt.Fprintf(log, "ledger: drop round %d/%d: %d%% of every node's packets dropped from %s for %v; leaders agreed %v after the heal\n",
			n, cfg.kills, r.percent, r.at.Format(timeFormat), cfg.hold, r.backIn.Round(time.Millisecond))
		if err := sleep(ctx, cfg.settle); err != nil {
			return rounds, err
		}
	}
	return rounds, nil
}

func dropOne(ctx context.Context, c *cluster, cfg config, all []int, r *dropRound) error {
	if _, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout); err != nil {
		return fmt.Errorf("cluster not settled before the round: %w", err)
	}
	r.at = time.Now()
	var faultErr error
	for _, id := range all {
		if err := c.faultArgs(ctx, "drop", fmt.Sprint(id), fmt.Sprint(r.percent)); err != nil {
			faultErr = err
			break
		}
	}
	if faultErr == nil {
		faultErr = sleep(ctx, cfg.hold)
	}
	// Heal every node whatever happened, so the read-back finds a whole cluster.
	healCtx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	for _, id := range all {
		_ = c.faultArgs(healCtx, "heal", fmt.Sprint(id))
	}
	r.healed = time.Now()
	if faultErr != nil {
		return faultErr
	}
	if _, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout); err != nil {
		return fmt.Errorf("healed, but the cluster did not agree on leaders: %w", err)
	}
	r.backIn = time.Since(r.healed)
	return nil
}

// measureDrops fills each round's figures from the acknowledgements.
func measureDrops(rounds []dropRound, acks []ack, stoppedAt time.Time) {
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

// printDrops prints the rounds and returns whether a round broke a liveness bound:
// no acknowledgement within progressBound of its heal.
func printDrops(w io.Writer, rounds []dropRound) bool {
	fmt.Fprintln(w, "round  drop_pct  hold_acks  gap_ms  progress_ms  back_ms")
	var gaps, progress []time.Duration
	slow := false
	for _, r := range rounds {
		p := ms(r.progressIn)
		if r.noProgress {
			p = "none"
		}
		fmt.Fprintf(w, "%5d  %8d  %9d  %6s  %11s  %7s\n", r.n, r.percent, r.ackedDuring, ms(r.gap), p, ms(r.backIn))
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
	fmt.Fprintf(w, "drop rounds: %d; longest gap without an acknowledgement p50 %s ms, max %s ms; first acknowledgement after the heal p50 %s ms, max %s ms (bound %v)\n",
		len(rounds), gapMed, gapMax, progMed, progMax, progressBound)
	if slow {
		fmt.Fprintf(w, "LIVENESS: a round had no acknowledgement within %v of its heal\n", progressBound)
	}
	return slow
}

package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// killLeaders kills the leader of partition 0 (with -txn, in turn with a
// transaction coordinator, see killTarget) cfg.kills times: kill -9, wait until
// the survivors agree on new leaders for every partition it led, keep it down for
// cfg.down, restart it, wait until all nodes agree on the leaders again, settle.
// With -fault pause the leader is stopped with SIGSTOP instead and resumed with
// SIGCONT: it comes back with its memory as it was, a deposed leader that still
// believes it leads, as after a long GC pause or a VM stall.
// It stops at the first step that does not finish in cfg.waitTimeout and returns
// the kills so far with that error; the failed kill carries it too.
func killLeaders(ctx context.Context, c *cluster, cfg config, log io.Writer) ([]kill, error) {
	var kills []kill
	all := c.nodes()
	for n := 1; n <= cfg.kills; n++ {
		k, err := killOne(ctx, c, cfg, all, n)
		kills = append(kills, k)
		if err != nil {
			fmt.Fprintf(log, "ledger: kill %d/%d: %v\n", n, cfg.kills, err)
			return kills, err
		}
		stopped, resumed := "killed", "restart"
		if cfg.fault == "pause" {
			stopped, resumed = "paused", "SIGCONT"
		}
		what := ""
		if k.kind != "" {
			what = fmt.Sprintf("%s, coordinator of %s partitions %v, ", k.kind, transactionTopic, k.coordinated)
		}
		fmt.Fprintf(log, "ledger: %s %d/%d: %snode %d (led %v, epoch %d) %s at %s; node %d leads in epoch %d after %v; back %v after %s\n",
			cfg.fault, n, cfg.kills, what, k.node, k.led, k.epoch, stopped, k.at.Format(timeFormat), k.newLeader, k.newEpoch,
			k.electedIn.Round(time.Millisecond), k.backIn.Round(time.Millisecond), resumed)
		if err := sleep(ctx, cfg.settle); err != nil {
			return kills, err
		}
	}
	return kills, nil
}

func killOne(ctx context.Context, c *cluster, cfg config, all []int, n int) (kill, error) {
	k := kill{n: n}
	fail := func(format string, args ...any) (kill, error) {
		k.err = fmt.Sprintf(format, args...)
		return k, fmt.Errorf("%s", k.err)
	}
	before, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout)
	if err != nil {
		return fail("cluster not settled before the kill: %v", err)
	}
	var target int
	target, k.kind = killTarget(cfg, c, n)
	k.node, k.epoch = before[target].leader, before[target].epoch
	for p, v := range before {
		switch {
		case v.leader != k.node:
		case p < c.parts:
			k.led = append(k.led, int32(p))
			k.ledEpochs = append(k.ledEpochs, v.epoch)
		default:
			k.coordinated = append(k.coordinated, c.coordinators[p-c.parts])
		}
	}
	stop, resume := c.kill, c.restart
	if cfg.fault == "pause" {
		stop, resume = c.pause, c.resume
	}
	k.at = time.Now()
	if err := stop(ctx, int(k.node)); err != nil {
		return fail("%v", err)
	}
	var survivors []int
	for _, id := range all {
		if id != int(k.node) {
			survivors = append(survivors, id)
		}
	}
	after, err := c.waitAgreed(ctx, survivors, k.node, cfg.waitTimeout)
	if err != nil {
		// Bring the node back so the read-back has a whole cluster, then stop.
		_ = resume(ctx, int(k.node))
		return fail("no new leader among nodes %v: %v", survivors, err)
	}
	k.electedIn = time.Since(k.at)
	k.newLeader, k.newEpoch = after[target].leader, after[target].epoch
	for p := range before {
		if before[p].leader == k.node && after[p].epoch <= before[p].epoch {
			_ = resume(ctx, int(k.node))
			return fail("%s: leader epoch %d after the kill, %d before", c.describe(p), after[p].epoch, before[p].epoch)
		}
	}
	if err := sleep(ctx, time.Until(k.at.Add(cfg.down))); err != nil {
		return k, err
	}
	k.restarted = time.Now()
	if err := resume(ctx, int(k.node)); err != nil {
		return fail("%v", err)
	}
	if _, err := c.waitAgreed(ctx, all, -1, cfg.waitTimeout); err != nil {
		return fail("node %d restarted but the cluster did not agree on leaders: %v", k.node, err)
	}
	k.backIn = time.Since(k.restarted)
	return k, nil
}

// killTarget is the index in a cluster view of the partition whose leader kill n
// takes down, and what that leader is ("" outside -txn). With -txn the kills
// alternate (-txn-kill alternate, odd kills the leader of partition 0, even ones a
// coordinator) or are all of one kind; coordinator kills take the producers'
// coordinators in turn.
func killTarget(cfg config, c *cluster, n int) (int, string) {
	if !cfg.txn {
		return 0, ""
	}
	coordinatorTurn := cfg.txnKill == "coordinator" || (cfg.txnKill == "alternate" && n%2 == 0)
	if !coordinatorTurn || len(c.coordinators) == 0 {
		return 0, "leader"
	}
	turn := n - 1
	if cfg.txnKill == "alternate" {
		turn = n/2 - 1
	}
	j := turn % len(c.coordinators)
	return c.parts + j, fmt.Sprintf("coordinator of producer %d", j)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

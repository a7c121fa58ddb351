package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

const timeFormat = "15:04:05.000"

// kill is one leader kill as the harness did it.
type kill struct {
	n          int
	node       int32   // the node killed: the leader of partition 0
	led        []int32 // the partitions it led when killed
	ledEpochs  []int32 // their leader epochs before the kill
	epoch      int32   // partition 0's leader epoch before the kill
	at         time.Time
	newLeader  int32
	newEpoch   int32
	electedIn  time.Duration // until the survivors agreed on a new leader of partition 0 (from Metadata)
	restarted  time.Time
	backIn     time.Duration // from restart until every node agreed on the leaders again
	err        string
	windowEnd  time.Time     // the next kill, or the end of production
	gap        time.Duration // longest time without an acknowledgement on one partition it led
	anyGap     time.Duration // longest time without an acknowledgement on any partition
	failover   time.Duration // until every partition the node led had a record acknowledged in a later epoch
	noFailover bool          // some partition it led had no such acknowledgement before windowEnd
	// Acknowledgements, after failover, of records written in the dead leader's
	// epoch: batches it had replicated but not acknowledged, which the client
	// retried and the new leader recognised by producer id and sequence.
	deduplicated int
	// With -txn: what the node was killed as, "leader" (of partition 0) or
	// "coordinator of producer J", and the watched __transaction_state partitions
	// it led.
	kind        string
	coordinated []int32
}

// ackTimes is the acknowledgement times of partitions in parts (all if nil), sorted.
func ackTimes(acks []ack, parts []int32) []time.Time {
	var ts []time.Time
	for _, a := range acks {
		if parts == nil || contains(parts, a.partition) {
			ts = append(ts, a.at)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return ts
}

func contains(xs []int32, x int32) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// longestGap is the longest time without an acknowledgement in ts (sorted) within
// [from, to): it starts from the last acknowledgement before from, and runs to `to`
// if the acknowledgements stop.
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	i := sort.Search(len(ts), func(i int) bool { return ts[i].After(from) })
	prev := from
	if i > 0 {
		prev = ts[i-1]
	}
	var gap time.Duration
	for ; i < len(ts) && ts[i].Before(to); i++ {
		gap = max(gap, ts[i].Sub(prev))
		prev = ts[i]
	}
	return max(gap, to.Sub(prev))
}

// epochIndex is the leader epoch each record was written in, from the read-back.
type epochIndex map[int32]map[int64]int32

func newEpochIndex(logs map[int32][]logRecord) epochIndex {
	ix := epochIndex{}
	for p, rs := range logs {
		ix[p] = map[int64]int32{}
		for _, r := range rs {
			ix[p][r.offset] = r.epoch
		}
	}
	return ix
}

// failoverOf is the time from the kill to the first acknowledgement on partition p
// of a record written in a leader epoch after `before`: acknowledgements that reach
// the client just after the kill are the dead leader's, still on the wire.
func failoverOf(acks []ack, ix epochIndex, p int32, before int32, from, to time.Time) (time.Duration, bool) {
	for _, a := range acks {
		if a.partition != p || !a.at.After(from) || !a.at.Before(to) {
			continue
		}
		if e, ok := ix[p][a.offset]; ok && e > before {
			return a.at.Sub(from), true
		}
	}
	return 0, false
}

// oldEpochAcks counts acknowledgements on partition p in [from, to) of records
// written in epoch `before` or earlier.
func oldEpochAcks(acks []ack, ix epochIndex, p int32, before int32, from, to time.Time) int {
	n := 0
	for _, a := range acks {
		if a.partition == p && !a.at.Before(from) && a.at.Before(to) {
			if e, ok := ix[p][a.offset]; ok && e <= before {
				n++
			}
		}
	}
	return n
}

// measure fills in each kill's gap (the longest of the partitions the killed node
// led, each taken alone), gap on any partition, and failover time.
func measure(kills []kill, acks []ack, ix epochIndex) {
	all := ackTimes(acks, nil)
	for i := range kills {
		k := &kills[i]
		k.anyGap = longestGap(all, k.at, k.windowEnd)
		for j, p := range k.led {
			k.gap = max(k.gap, longestGap(ackTimes(acks, []int32{p}), k.at, k.windowEnd))
			d, ok := failoverOf(acks, ix, p, k.ledEpochs[j], k.at, k.windowEnd)
			k.noFailover = k.noFailover || !ok
			k.failover = max(k.failover, d)
			if ok {
				k.deduplicated += oldEpochAcks(acks, ix, p, k.ledEpochs[j], k.at.Add(d), k.windowEnd)
			}
		}
	}
}

// stats is the median and max of ds in milliseconds, "-" if there are none.
func stats(ds []time.Duration) (string, string) {
	if len(ds) == 0 {
		return "-", "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return ms(med), ms(s[len(s)-1])
}

func ms(d time.Duration) string { return fmt.Sprint(d.Milliseconds()) }

func printKills(w io.Writer, kills []kill) {
	fmt.Fprintln(w, "kill  node  led       epoch  new_leader  elected_ms  failover_ms  gap_ms  any_gap_ms  back_ms  deduplicated")
	for _, k := range kills {
		led := strings.Trim(fmt.Sprint(k.led), "[]")
		failover := ms(k.failover)
		if k.noFailover {
			failover = "none"
		}
		newLeader := fmt.Sprintf("%d (e%d)", k.newLeader, k.newEpoch)
		fmt.Fprintf(w, "%4d  %4d  %-8s  %5d  %-10s  %10s  %11s  %6s  %10s  %7s  %12d\n",
			k.n, k.node, led, k.epoch, newLeader, ms(k.electedIn), failover, ms(k.gap), ms(k.anyGap), ms(k.backIn), k.deduplicated)
		if k.err != "" {
			fmt.Fprintf(w, "      error: %s\n", k.err)
		}
	}
}

// sample is at most n items of xs, for messages.
func sample[T any](xs []T, n int) string {
	if len(xs) <= n {
		return fmt.Sprint(xs)
	}
	return fmt.Sprintf("%v ... (%d in all)", xs[:n], len(xs))
}

// printEpochs prints, per partition, the runs of leader epochs in the log (epoch
// and record count), to show which leaders wrote what.
func printEpochs(w io.Writer, logs map[int32][]logRecord) {
	for p := int32(0); p < int32(len(logs)); p++ {
		var runs []string
		var n int
		for i, r := range logs[p] {
			n++
			if i+1 == len(logs[p]) || logs[p][i+1].epoch != r.epoch {
				runs = append(runs, fmt.Sprintf("e%d:%d", r.epoch, n))
				n = 0
			}
		}
		fmt.Fprintf(w, "log p%d epochs: %s\n", p, strings.Join(runs, " "))
	}
}

package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// txnRun is everything a -txn run gathered, for the report.
type txnRun struct {
	kills       []kill
	txns        []*txn
	problems    []string
	dataLoss    []string
	clients     int
	fetchErrors []string
	readErrs    []error
	killErr     error
	stable      stableOffsets
	lastEnd     time.Time
}

// txnsEndedIn counts the transactions that ended in [from, to) by outcome.
func txnsEndedIn(txns []*txn, from, to time.Time) (counts [3]int) {
	for _, t := range txns {
		if !t.ended.Before(from) && t.ended.Before(to) {
			counts[t.result]++
		}
	}
	return counts
}

// commitStall is the longest time one producer went without a committed
// transaction, from a kill to the next (the producer's last commit before the kill
// starts it): the longest of the producers' stalls.
func commitStall(txns []*txn, k kill) time.Duration {
	byProducer := map[int][]time.Time{}
	for _, t := range txns {
		if _, ok := byProducer[t.producer]; !ok {
			byProducer[t.producer] = nil
		}
		if t.result == outcomeCommitted {
			byProducer[t.producer] = append(byProducer[t.producer], t.ended)
		}
	}
	var stall time.Duration
	for _, ends := range byProducer {
		sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
		stall = max(stall, longestGap(ends, k.at, k.windowEnd))
	}
	return stall
}

func printTxnKills(w io.Writer, kills []kill, txns []*txn) {
	fmt.Fprintln(w, "kill  node  target                    led       coordinated  elected_ms  back_ms  committed  aborted  unknown  commit_stall_ms")
	for _, k := range kills {
		counts := txnsEndedIn(txns, k.at, k.windowEnd)
		led := strings.Trim(fmt.Sprint(k.led), "[]")
		coordinated := strings.Trim(fmt.Sprint(k.coordinated), "[]")
		fmt.Fprintf(w, "%4d  %4d  %-24s  %-8s  %-11s  %10s  %7s  %9d  %7d  %7d  %15s\n",
			k.n, k.node, k.kind, led, coordinated, ms(k.electedIn), ms(k.backIn),
			counts[outcomeCommitted], counts[outcomeAborted], counts[outcomeUnknown], ms(commitStall(txns, k)))
		if k.err != "" {
			fmt.Fprintf(w, "      error: %s\n", k.err)
		}
	}
}

// reportTxns prints the findings and the summary line; it returns whether the run
// was incomplete (it could not finish, or proved nothing).
func reportTxns(out io.Writer, r txnRun, v txnVerdict) bool {
	incomplete := r.killErr != nil || len(r.dataLoss) > 0
	for _, err := range r.readErrs {
		if err != nil {
			incomplete = true
			fmt.Fprintf(out, "read-back: %v\n", err)
		}
	}
	if r.killErr != nil {
		fmt.Fprintf(out, "kills stopped early: %v\n", r.killErr)
	}
	if v.committed == 0 || v.aborted == 0 {
		incomplete = true
		fmt.Fprintf(out, "the run proved nothing: %d committed and %d aborted transactions\n", v.committed, v.aborted)
	}
	if len(r.problems) > 0 {
		fmt.Fprintf(out, "client errors outside a transaction (the client was replaced): %d, first: %s\n", len(r.problems), sample(r.problems, 3))
	}
	for _, d := range r.dataLoss {
		fmt.Fprintf(out, "franz-go detected data loss (OUT_OF_ORDER_SEQUENCE_NUMBER on a fresh sequence): %s\n", d)
	}
	if len(r.fetchErrors) > 0 {
		fmt.Fprintf(out, "read-back fetch errors (retried): %s\n", sample(r.fetchErrors, 5))
	}
	var unknown []string
	for _, t := range r.txns {
		if t.result == outcomeUnknown {
			unknown = append(unknown, fmt.Sprintf("txn %d (producer %d client %d, commit sent %v) at %s: %s",
				t.id, t.producer, t.client, t.commitSent, t.ended.Format(timeFormat), t.err))
		}
	}
	if len(unknown) > 0 {
		fmt.Fprintf(out, "unknown outcomes:\n  %s\n", strings.Join(unknown[:min(len(unknown), 10)], "\n  "))
	}
	for _, f := range []struct {
		name string
		xs   []string
	}{
		{"ABORTED READ", v.abortedRead}, {"LOST COMMIT", v.lostCommit}, {"PARTIAL", v.partial},
		{"DUPLICATE", v.duplicates}, {"REORDERED", v.reordered}, {"LOST ACKNOWLEDGED", v.lostAcked},
		{"MARKER MISMATCH", v.markerMismatch}, {"FOREIGN", v.foreign},
	} {
		if len(f.xs) > 0 {
			fmt.Fprintf(out, "%s (%d):\n  %s\n", f.name, len(f.xs), strings.Join(f.xs[:min(len(f.xs), 10)], "\n  "))
		}
	}
	if v.lsoStuck > 0 {
		fmt.Fprintf(out, "LSO STUCK on %d partitions %v after the last transaction ended: lso=%v hw=%v\n",
			v.lsoStuck, r.stable.at.Sub(r.lastEnd).Round(time.Millisecond), r.stable.lso, r.stable.hw)
	}

	var stalls, elections []time.Duration
	for _, k := range r.kills {
		if k.err == "" {
			stalls = append(stalls, commitStall(r.txns, k))
			elections = append(elections, k.electedIn)
		}
	}
	stallMed, stallMax := stats(stalls)
	elMed, elMax := stats(elections)
	fmt.Fprintf(out, "ledger: txn clients=%d acked=%d rc_records=%d ru_records=%d markers=%d unterminated=%d lost_acked=%d marker_mismatch=%d foreign=%d unknown_visible=%d unknown_invisible=%d aborted_after_error=%d lso_ms=%d end_offsets=%v\n",
		r.clients, v.acked, v.rcRecords, v.ruRecords, v.markers, v.unterminated, len(v.lostAcked), len(v.markerMismatch), len(v.foreign),
		v.unknownVisible, v.unknownInvisible, v.abortedAfterError, max(r.stable.at.Sub(r.lastEnd), 0).Milliseconds(), r.stable.hw)
	fmt.Fprintf(out, "ledger: txn commit_stall_ms median=%s max=%s elected_ms median=%s max=%s\n", stallMed, stallMax, elMed, elMax)
	fmt.Fprintf(out, "ledger: txn kills=%d txns=%d committed=%d aborted=%d unknown=%d aborted_read=%d lost_commit=%d partial=%d duplicates=%d reordered=%d lso_stuck=%d\n",
		len(stalls), v.txns, v.committed, v.aborted, v.unknown, len(v.abortedRead), len(v.lostCommit), len(v.partial),
		len(v.duplicates), len(v.reordered), v.lsoStuck)
	return incomplete
}

package main

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// Two partitions; ids 0, 2, 4 go to p0 and 1, 3 to p1.
func cleanRun() ([]ack, map[int32][]logRecord) {
	acks := []ack{{0, 0, 0, at(1)}, {1, 1, 0, at(2)}, {2, 0, 1, at(3)}, {3, 1, 1, at(4)}, {4, 0, 2, at(5)}}
	logs := map[int32][]logRecord{
		0: {{0, 0, 1, ""}, {1, 2, 1, ""}, {2, 4, 2, ""}},
		1: {{0, 1, 1, ""}, {1, 3, 1, ""}},
	}
	return acks, logs
}

func TestCheckCleanRun(t *testing.T) {
	acks, logs := cleanRun()
	v := check(acks, logs, 2)
	if v.failed() || v.acked != 5 || v.logged != 5 || v.unackedPresent != 0 {
		t.Fatalf("clean run judged %+v", v)
	}
}

func TestCheckFindsLossDuplicateReorderMismatchForeign(t *testing.T) {
	acks, logs := cleanRun()
	logs[0] = []logRecord{{0, 0, 1, ""}, {1, 4, 2, ""}, {2, 2, 2, ""}, {3, 4, 2, ""}, {4, 7, 2, ""}} // 2 after 4, 4 twice, 7 is p1's
	logs[1] = logs[1][:1]                                                                            // 3 lost
	v := check(acks, logs, 2)
	if len(v.lost) != 1 || v.lost[0] != 3 {
		t.Errorf("lost: %v", v.lost)
	}
	if len(v.duplicates) != 1 || v.duplicates[0] != 4 {
		t.Errorf("duplicates: %v", v.duplicates)
	}
	if len(v.reordered) != 1 {
		t.Errorf("reordered: %v", v.reordered)
	}
	if len(v.offsetMismatch) != 2 { // id 2 acked at p0@1 (now @2), id 4 acked at p0@2 (now @1, @3)
		t.Errorf("offset mismatch: %v", v.offsetMismatch)
	}
	if len(v.foreign) != 1 {
		t.Errorf("foreign: %v", v.foreign)
	}
}

func TestCheckFindsAcknowledgementsOutOfOrder(t *testing.T) {
	acks, logs := cleanRun()
	acks[0], acks[2] = acks[2], acks[0] // p0 acknowledged id 2 before id 0
	if v := check(acks, logs, 2); len(v.reordered) != 1 {
		t.Fatalf("reordered: %v", v.reordered)
	}
}

func TestCheckCountsUnacknowledgedRecordsWithoutFailing(t *testing.T) {
	acks, logs := cleanRun()
	v := check(acks[:4], logs, 2) // id 4 timed out on the client but was written
	if v.failed() || v.unackedPresent != 1 {
		t.Fatalf("%+v", v)
	}
}

func TestLongestGapSpansTheKillAndTheTail(t *testing.T) {
	ts := []time.Time{at(0), at(10), at(20), at(900), at(910)}
	if g := longestGap(ts, at(15), at(1000)); g != 880*time.Millisecond {
		t.Errorf("gap across the kill: %v", g)
	}
	if g := longestGap(ts, at(905), at(2000)); g != 1090*time.Millisecond {
		t.Errorf("gap to the window's end: %v", g)
	}
	if g := longestGap(nil, at(0), at(50)); g != 50*time.Millisecond {
		t.Errorf("no acknowledgements: %v", g)
	}
}

func TestFailoverSkipsTheDeadLeadersLateAcknowledgements(t *testing.T) {
	acks := []ack{{0, 0, 0, at(5)}, {1, 0, 1, at(12)}, {2, 0, 2, at(700)}}
	ix := epochIndex{0: {0: 3, 1: 3, 2: 4}}
	d, ok := failoverOf(acks, ix, 0, 3, at(10), at(5000))
	if !ok || d != 690*time.Millisecond {
		t.Fatalf("failover %v %v", d, ok)
	}
	if _, ok := failoverOf(acks, ix, 0, 4, at(10), at(5000)); ok {
		t.Fatal("no acknowledgement in a later epoch")
	}
}

package main

import (
	"encoding/binary"
	"testing"
	"time"
)

// batchAt is a probe batch rewritten as the broker stores it: base offset and
// leader epoch patched, CRC unchanged (it does not cover them).
func batchAt(base int64, epoch int32, value string) []byte {
	b := singleRecordBatch([]byte(value), t0)
	binary.BigEndian.PutUint64(b[0:], uint64(base))
	binary.BigEndian.PutUint32(b[12:], uint32(epoch))
	return b
}

func TestParseBatchesStopsAtZeroesAndBadCRC(t *testing.T) {
	var file []byte
	file = append(file, batchAt(0, 1, "probe a")...)
	file = append(file, batchAt(1, 2, "probe b")...)
	good := len(file)
	file = append(file, make([]byte, 4096)...) // preallocated space
	bs := parseBatches(file)
	if len(bs) != 2 || bs[0].base != 0 || bs[1].base != 1 || bs[1].epoch != 2 || logEnd(bs) != 2 {
		t.Fatalf("parsed %v", bs)
	}
	torn := append([]byte(nil), file[:good]...)
	torn = append(torn, batchAt(2, 2, "probe c")...)
	torn[len(torn)-1] ^= 0xff // last byte of the third batch
	if bs := parseBatches(torn); len(bs) != 2 {
		t.Fatalf("a batch failing its CRC was parsed: %v", bs)
	}
}

func TestPrefixAndDifference(t *testing.T) {
	a := []batchInfo{{0, 0, 1, 10}, {1, 4, 1, 11}, {6, 0, 1, 12}}
	b := []batchInfo{{0, 0, 1, 10}, {1, 4, 1, 11}, {6, 2, 2, 13}, {9, 0, 2, 14}}
	if d := firstDifference(a, b); d != 2 {
		t.Fatalf("first difference %d", d)
	}
	if p := prefixBefore(b, 6); len(p) != 2 {
		t.Fatalf("prefix before 6: %v", p)
	}
	if d := firstDifference(a[:2], b); d != 2 {
		t.Fatalf("prefix: first difference %d", d)
	}
}

func TestJudgePartitions(t *testing.T) {
	cut := at(1000)
	logs := map[int32][]logRecord{0: {
		{0, -1, 1, "probe r1 n1 p0 #0"},
		{1, -1, 2, "probe r1 n2 p0 #9"},
	}}
	r := round{n: 1, node: 1, led: []int32{0}, ledEpochs: []int32{1}, cut: cut, probes: []probeResult{
		{round: 1, node: 1, partition: 0, value: "probe r1 n1 p0 #0", sent: at(990), at: at(1005), offset: 0},
		{round: 1, node: 2, partition: 0, value: "probe r1 n2 p0 #9", sent: at(1900), at: at(1950), offset: 1},
	}}
	claims := map[claim]time.Time{{1, 0, 1, 1}: cut, {2, 0, 2, 2}: cut}
	if v := judgePartitions([]round{r}, logs, claims, 500*time.Millisecond); v.failed() || v.probeAcks != 2 || v.lastAcks[0] != 5*time.Millisecond {
		t.Fatalf("clean round judged %+v", v)
	}
	// The isolated node acknowledges late, a record the log does not hold, in the new
	// leader's epoch; and a node claims another leader for epoch 2.
	late := r
	late.probes = append(append([]probeResult(nil), r.probes...),
		probeResult{round: 1, node: 1, partition: 0, value: "probe r1 n1 p0 #40", sent: at(1800), at: at(1800), offset: 1})
	// Acknowledging in a later epoch, a leadership won back after the heal, is not late.
	back := r
	back.probes = append(append([]probeResult(nil), r.probes...),
		probeResult{round: 1, node: 1, partition: 0, value: "probe r1 n1 p0 #60", sent: at(7000), at: at(7001), offset: 2})
	backLogs := map[int32][]logRecord{0: append(append([]logRecord(nil), logs[0]...), logRecord{2, -1, 3, "probe r1 n1 p0 #60"})}
	if v := judgePartitions([]round{back}, backLogs, claims, 500*time.Millisecond); v.failed() || v.lastAcks[0] != 5*time.Millisecond {
		t.Fatalf("an acknowledgement in a regained leadership judged %+v", v)
	}
	claims[claim{3, 0, 1, 2}] = cut
	v := judgePartitions([]round{late}, logs, claims, 500*time.Millisecond)
	if len(v.lateAcks) != 1 || len(v.probeLost) != 1 || len(v.twoLeaders) != 1 {
		t.Fatalf("violations judged %+v", v)
	}
}

package main

import (
	"testing"
)

func TestJavaHashCodeAndPlacement(t *testing.T) {
	// Java: "group".hashCode() = 98629247, "my-group".hashCode() = -1906497762.
	if h := javaHashCode("group"); h != 98629247 {
		t.Errorf("group: %d", h)
	}
	if h := javaHashCode("my-group"); h != -1906497762 {
		t.Errorf("my-group: %d", h)
	}
	if p := coordinatorPartition("my-group", 50); p != 1906497762%50 {
		t.Errorf("my-group placed in %d", p)
	}
}

// Two partitions. Transaction 0 (3 records: p0, p1, p0) committed, 1 (2 records:
// p1, p0) aborted; each ends with a marker per partition.
func txnRun2() ([]*txn, map[int32][]txnLogRecord, map[int32][]txnLogRecord, map[int32]int64) {
	txns := []*txn{
		{id: 0, producer: 0, commitSent: true, result: outcomeCommitted,
			writes: []txnWrite{{partition: 0, offset: 0}, {partition: 1, offset: 0}, {partition: 0, offset: 1}}},
		{id: 1, producer: 0, wantAbort: true, result: outcomeAborted,
			writes: []txnWrite{{partition: 1, offset: 2}, {partition: 0, offset: 3}}},
	}
	data := func(off, id int64, i int) txnLogRecord {
		return txnLogRecord{offset: off, txn: id, i: i, producerID: 7}
	}
	marker := func(off int64, commit bool) txnLogRecord {
		return txnLogRecord{offset: off, txn: -1, control: true, commit: commit, producerID: 7}
	}
	ru := map[int32][]txnLogRecord{
		0: {data(0, 0, 0), data(1, 0, 2), marker(2, true), data(3, 1, 1), marker(4, false)},
		1: {data(0, 0, 1), marker(1, true), data(2, 1, 0), marker(3, false)},
	}
	rc := map[int32][]txnLogRecord{
		0: {data(0, 0, 0), data(1, 0, 2), marker(2, true), marker(4, false)},
		1: {data(0, 0, 1), marker(1, true), marker(3, false)},
	}
	return txns, rc, ru, map[int32]int64{0: 5, 1: 4}
}

func TestCheckTxnsCleanRun(t *testing.T) {
	txns, rc, ru, ends := txnRun2()
	v := checkTxns(txns, rc, ru, ends, 2)
	if v.failed() || v.committed != 1 || v.aborted != 1 || v.rcRecords != 3 || v.ruRecords != 5 || v.markers != 4 || v.acked != 5 {
		t.Fatalf("clean run judged %+v", v)
	}
}

func TestCheckTxnsFindsAbortedReadAndMarkerMismatch(t *testing.T) {
	txns, rc, ru, ends := txnRun2()
	rc[1] = []txnLogRecord{rc[1][0], rc[1][1], ru[1][2], rc[1][2]} // aborted txn 1's record 0 shown
	v := checkTxns(txns, rc, ru, ends, 2)
	if len(v.abortedRead) != 1 || len(v.partial) != 1 || len(v.markerMismatch) != 1 {
		t.Fatalf("%+v", v)
	}
}

func TestCheckTxnsFindsLostCommitDuplicateReorder(t *testing.T) {
	txns, rc, ru, ends := txnRun2()
	rc[1] = rc[1][1:]                                              // committed txn 0 lost its record 1
	rc[0] = []txnLogRecord{rc[0][1], rc[0][0], rc[0][0], rc[0][2]} // record 2 before record 0, record 0 twice
	v := checkTxns(txns, rc, ru, ends, 2)
	if len(v.lostCommit) != 1 || len(v.partial) != 1 || len(v.duplicates) != 1 || len(v.reordered) != 1 {
		t.Fatalf("%+v", v)
	}
}

func TestCheckTxnsUnknownOutcomeMayGoEitherWayButWhole(t *testing.T) {
	txns, rc, ru, ends := txnRun2()
	txns[0].result = outcomeUnknown // the commit's answer was lost; it committed
	txns[1].result = outcomeUnknown // the abort's answer was lost
	v := checkTxns(txns, rc, ru, ends, 2)
	if v.failed() || v.unknownVisible != 1 || v.unknownInvisible != 1 {
		t.Fatalf("%+v", v)
	}
}

func TestCheckTxnsFindsLostAcknowledgementAndOpenTransaction(t *testing.T) {
	txns, rc, ru, ends := txnRun2()
	ru[0] = ru[0][:4] // txn 1's marker on p0 missing: open there
	ends[0] = 3
	v := checkTxns(txns, rc, ru, ends, 2)
	if v.unterminated != 1 || len(v.lostAcked) != 0 {
		t.Fatalf("%+v", v)
	}
	ru[1] = ru[1][2:] // txn 0's record on p1 gone from the log
	if v := checkTxns(txns, rc, ru, ends, 2); len(v.lostAcked) != 1 || len(v.markerMismatch) != 1 {
		t.Fatalf("%+v", v)
	}
}

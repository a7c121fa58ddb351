package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A flip breaks its batch's CRC, so the parse stops there, and applying it again
// restores the file byte for byte.
func TestFlipBreaksTheBatchAndFlipsBack(t *testing.T) {
	first := singleRecordBatch([]byte("first record"), time.Now())
	second := singleRecordBatch([]byte("second record"), time.Now())
	data := append(append([]byte{}, first...), second...)
	spans := batchSpans(data)
	if len(spans) != 2 || spans[0].pos != 0 || spans[1].pos != len(first) || spans[1].next != len(data) {
		t.Fatalf("spans of two batches: %+v", spans)
	}
	path := filepath.Join(t.TempDir(), "00000000000000000000.log")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	f := flip{path: path, batch: spans[1].batch}
	records := int64(spans[1].next - spans[1].pos - batchHeaderBytes)
	for len(f.offsets) < 3 {
		off := int64(spans[1].pos+batchHeaderBytes) + rng.Int64N(records)
		if !slices.Contains(f.offsets, off) {
			f.offsets, f.masks = append(f.offsets, off), append(f.masks, 1<<rng.IntN(8))
		}
	}
	if err := f.apply(); err != nil {
		t.Fatal(err)
	}
	damaged, _ := os.ReadFile(path)
	if got := parseBatches(damaged); len(got) != 1 {
		t.Fatalf("after the flip the parse holds %d batches, want the first only", len(got))
	}
	if err := f.apply(); err != nil {
		t.Fatal(err)
	}
	restored, _ := os.ReadFile(path)
	if string(restored) != string(data) {
		t.Fatal("flipping the bits again did not restore the file")
	}
}

package main

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
)

// batchInfo is one record batch of a partition's segment files, as much of its v2
// header as says whether two replicas hold the same batch.
type batchInfo struct {
	base      int64
	lastDelta int32
	epoch     int32
	crc       uint32
}

func (b batchInfo) end() int64 { return b.base + int64(b.lastDelta) + 1 }

func (b batchInfo) String() string {
	return fmt.Sprintf("[%d..%d e%d crc %08x]", b.base, b.end()-1, b.epoch, b.crc)
}

const (
	batchHeaderBytes   = 61
	segmentBytesMax    = 1 << 30
	partitionFilesMax  = 10_000
	batchesPerFilesMax = 10_000_000
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// partitionDir is where node id keeps topic-partition: cluster.sh and partition.sh
// give node i the data directory DIR/node-i/data, and Keel names a partition's
// directory TOPIC-PARTITION in it.
func partitionDir(clusterDir string, id int, topic string, partition int32) string {
	return filepath.Join(clusterDir, fmt.Sprintf("node-%d", id), "data", fmt.Sprintf("%s-%d", topic, partition))
}

// readSegments parses the partition's `.log` segment files (Kafka v2 batches, files
// named by base offset) in offset order. A file's parse stops at the first header
// that is zero (preallocated space), short, or whose CRC does not match: the part of
// a file the broker has not written yet.
func readSegments(dir string) ([]batchInfo, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no segment files in %s", dir)
	}
	if len(files) > partitionFilesMax {
		return nil, fmt.Errorf("%d segment files in %s, more than %d", len(files), dir, partitionFilesMax)
	}
	sort.Strings(files) // zero-padded base offsets sort as numbers
	var out []batchInfo
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if len(data) > segmentBytesMax {
			return nil, fmt.Errorf("%s: %d bytes, more than %d", f, len(data), segmentBytesMax)
		}
		out = append(out, parseBatches(data)...)
		if len(out) > batchesPerFilesMax {
			return nil, fmt.Errorf("%s: more than %d batches", dir, batchesPerFilesMax)
		}
	}
	return out, nil
}

func parseBatches(data []byte) []batchInfo {
	var out []batchInfo
	for _, s := range batchSpans(data) {
		out = append(out, s.batch)
	}
	return out
}

// batchSpan is a batch and where it lies in its file: bytes pos up to next.
type batchSpan struct {
	batch     batchInfo
	pos, next int
}

// batchSpans is parseBatches with each batch's place in the file.
func batchSpans(data []byte) []batchSpan {
	var out []batchSpan
	for pos := 0; pos+batchHeaderBytes <= len(data); {
		length := int(int32(binary.BigEndian.Uint32(data[pos+8:])))
		next := pos + 12 + length
		if length < batchHeaderBytes-12 || next > len(data) || data[pos+16] != 2 {
			break
		}
		crc := binary.BigEndian.Uint32(data[pos+17:])
		if crc32.Checksum(data[pos+21:next], castagnoli) != crc {
			break
		}
		out = append(out, batchSpan{batch: batchInfo{
			base:      int64(binary.BigEndian.Uint64(data[pos:])),
			lastDelta: int32(binary.BigEndian.Uint32(data[pos+23:])),
			epoch:     int32(binary.BigEndian.Uint32(data[pos+12:])),
			crc:       crc,
		}, pos: pos, next: next})
		pos = next
	}
	return out
}

// logEnd is the offset after the last batch, 0 for an empty log.
func logEnd(bs []batchInfo) int64 {
	if len(bs) == 0 {
		return 0
	}
	return bs[len(bs)-1].end()
}

// prefixBefore is the batches that start before offset end.
func prefixBefore(bs []batchInfo, end int64) []batchInfo {
	i := sort.Search(len(bs), func(i int) bool { return bs[i].base >= end })
	return bs[:i]
}

// firstDifference is the index of the first batch where a and b differ, or the
// shorter length when one is a prefix of the other.
func firstDifference(a, b []batchInfo) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

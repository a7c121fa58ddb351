package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Power loss, emulated after a kill -9 (`-fault power`, and the `power` class of
// `-fault mixed -mixed-power`). A node started with a `power-loss` file in its
// directory runs with KEEL_TEST_SYNC_LOG=node-<i>/synced.tsv (compat/keel.sh,
// compat/faults/netns-cluster.sh): after every fdatasync Keel notes what it made
// durable, before it goes on to acknowledge anything (storage/src/sync_log.rs). Once
// every node is killed, each file is put in a state a power cut could leave:
//
//   - `cut` (segment files, state files): the bytes past the last durable length are
//     cut at a random point, and the last up to 512 bytes kept past the durable
//     length are overwritten with garbage, a torn sector;
//   - `overwrite` (preallocated journal files, whose size is durable): up to 8 KiB past
//     the durable end of each journal's newest file are overwritten with garbage, a
//     write in flight torn (an older file saw its last write synced before the journal
//     moved on, so a power cut leaves it as it is).
//
// A file the log does not name is left alone (a kinder crash, never a harsher one).

// syncedEntry is the last durable length noted for a file, and how to damage past it.
type syncedEntry struct {
	length    int64
	overwrite bool
}

// powerCutStats counts what one node's cut did.
type powerCutStats struct {
	files    int   // files named in the log that still exist
	damaged  int   // files whose tail was cut or torn
	bytesCut int64 // bytes removed past the durable lengths
}

// readSyncLog reads node-<id>/synced.tsv: the last entry per path.
func readSyncLog(path string) (map[string]syncedEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]syncedEntry{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 3 {
			continue // a line being written when the node was killed
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		out[fields[0]] = syncedEntry{length: n, overwrite: fields[2] == "overwrite"}
	}
	return out, sc.Err()
}

// powerCut damages node id's files as a power loss could, from its sync log. The node
// must be down.
func (c *cluster) powerCut(id int, rng *rand.Rand) (powerCutStats, error) {
	var st powerCutStats
	dir := filepath.Join(c.dir, fmt.Sprintf("node-%d", id))
	entries, err := readSyncLog(filepath.Join(dir, "synced.tsv"))
	if err != nil {
		return st, fmt.Errorf("node %d has no sync log (start it with a power-loss file in its directory): %w", id, err)
	}
	// The newest file of each journal directory (names are zero-padded sequence numbers).
	newest := map[string]string{}
	for path, e := range entries {
		if _, err := os.Stat(path); err == nil && e.overwrite && path > newest[filepath.Dir(path)] {
			newest[filepath.Dir(path)] = path
		}
	}
	for path, e := range entries {
		info, err := os.Stat(path)
		if err != nil {
			continue // removed or renamed since
		}
		if e.overwrite && newest[filepath.Dir(path)] != path {
			continue
		}
		st.files++
		size := info.Size()
		if size <= e.length {
			continue
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return st, err
		}
		var damage error
		if e.overwrite {
			n := min(size-e.length, 1+rng.Int64N(8<<10))
			damage = garble(f, e.length, n, rng)
		} else {
			keep := rng.Int64N(size - e.length + 1)
			st.bytesCut += size - e.length - keep
			if damage = f.Truncate(e.length + keep); damage == nil && keep > 0 {
				torn := min(keep, 512)
				damage = garble(f, e.length+keep-torn, torn, rng)
			}
		}
		if err := f.Close(); damage == nil {
			damage = err
		}
		if damage != nil {
			return st, fmt.Errorf("power cut of %s: %w", path, damage)
		}
		st.damaged++
	}
	return st, nil
}

// garble overwrites n bytes of f at off with random bytes.
func garble(f *os.File, off, n int64, rng *rand.Rand) error {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	_, err := f.WriteAt(b, off)
	return err
}

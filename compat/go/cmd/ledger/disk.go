package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Faults of one node's disk and clock while the cluster runs: `-fault disk-full`,
// `-fault bitflip`, `-fault cut` and `-fault step`, drawn by `-fault mixed` with
// -mixed-disk, -mixed-bitflip (bitflip and cut) and -mixed-step.
//
//   - disk-full: the file system holding the data directory of partition 0's leader
//     is filled (a filler file allocated until ENOSPC) while the producer keeps
//     producing, held for -hold, then the filler is removed. The node's data directory
//     must be a file system of its own (node-<i>/disk, a loop-mounted ext4 made by
//     compat/faults/netns-cluster.sh with KEEL_NETNS_LOOP_MIB), or the fault would
//     fill the host's disk. Writes to the partitions the node led must be acknowledged
//     again within diskFreedBound of the removal, and the node's segment files of every
//     partition must again hold what the other replicas' held at the removal within
//     writtenOutBound (else the node is restarted, so the rest of the run goes on
//     from a node that writes, and the run fails).
//   - bitflip: a follower of partition 0 is killed with SIGKILL; one to three bits are
//     flipped in one batch of its partition-0 segment files that the leader's files
//     hold too (so a majority has it: committed, below the high watermark), inside the
//     records the batch's CRC covers; it is restarted. The node must find the damage
//     (its log names the replica damaged within damageFoundBound), and so serve
//     nothing from it and not lead, and then have it rebuilt from the leader
//     (replication/rebuild.rs in the broker): its log says it deleted the damaged copy,
//     and the leader names it in sync again, within rebuildBound. Only when it was
//     neither found nor rebuilt are the same bits flipped back at the end of the
//     round, as an operator would restore a copy, so the next rounds run on three
//     replicas.
//   - cut: as bitflip, but the segment file is cut short inside or at the start of
//     such a batch. Records a journal checkpoint made durable are then gone, which
//     the node must read as damage and have rebuilt as above. A cut above the
//     node's last checkpoint is not damage: the journal writes the tail again, and
//     the round only reports it; the end's replica comparison checks that
//     the node's copy is whole either way.
//   - step: the wall clock of partition 0's leader is stepped by up to ±stepSecondsMax
//     while it runs (its node-<i>/faketime file replaced; libfaketime re-reads it within
//     a second, compat/node-env.sh), held for -hold, and stepped back. Monotonic clocks
//     are left alone.

const (
	// diskFreedBound is how soon after the filler is removed a record on a partition
	// the full node led must be acknowledged.
	diskFreedBound = 5 * time.Second
	// writtenOutBound is how soon after the filler is removed the node's segment files
	// must hold what the other replicas' did then.
	writtenOutBound = 10 * time.Second
	// damageFoundBound is how long a restarted node may take to find the flipped bits.
	damageFoundBound = 60 * time.Second
	// cutFoundBound is how long a restarted node may take to report a cut segment:
	// it reads the cut as damage at open.
	cutFoundBound = 15 * time.Second
	// rebuildBound is how long a damaged replica may take, once found, to be deleted,
	// copied again from the leader and named in sync by it.
	rebuildBound = 60 * time.Second
	// stepSecondsMax bounds the wall-clock steps of -fault step.
	stepSecondsMax = 600
	// fillerName is the file that fills a node's disk, beside its data directory.
	fillerName     = "filler"
	flippedBitsMax = 3
)

// nodeDisk is the mount point of node id's own file system (netns-cluster.sh's
// netns_loop_up), which holds its data directory.
func (c *cluster) nodeDisk(id int) string {
	return filepath.Join(c.dir, fmt.Sprintf("node-%d", id), "disk")
}

// fillDisk allocates a filler file on node id's file system until ENOSPC and returns
// its size. It refuses when the data directory is not on a file system of its own.
func (c *cluster) fillDisk(id int) (int64, error) {
	mount := c.nodeDisk(id)
	var disk, parent syscall.Stat_t
	if err := syscall.Stat(mount, &disk); err != nil {
		return 0, fmt.Errorf("node %d has no disk of its own (%w); start it with KEEL_NETNS_LOOP_MIB", id, err)
	}
	if err := syscall.Stat(filepath.Dir(mount), &parent); err != nil || disk.Dev == parent.Dev {
		return 0, fmt.Errorf("%s is not a mount point: filling it would fill the host's disk", mount)
	}
	f, err := os.OpenFile(filepath.Join(mount, fillerName), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var st syscall.Statfs_t
	if err := syscall.Statfs(mount, &st); err != nil {
		return 0, err
	}
	size := int64(0)
	// One large allocation, then smaller ones until nothing is left.
	if free := int64(st.Bfree)*st.Bsize - 4<<20; free > 0 {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, free); err == nil {
			size = free
		}
	}
	for _, chunk := range []int64{1 << 20, 64 << 10, 4 << 10} {
		for {
			err := syscall.Fallocate(int(f.Fd()), 0, size, chunk)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return size, fmt.Errorf("fallocate %s: %w", f.Name(), err)
			}
			size += chunk
		}
	}
	return size, nil
}

// freeDisk removes node id's filler file.
func (c *cluster) freeDisk(id int) error {
	err := os.Remove(filepath.Join(c.nodeDisk(id), fillerName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// damage is what a bitflip or cut round did to a stopped follower's segment file.
type damage interface {
	fmt.Stringer
	file() string
	// undo puts the file back as it was.
	undo() error
}

// flip is bits flipped in a segment file: undoing it flips them again.
type flip struct {
	path    string
	batch   batchInfo
	offsets []int64
	masks   []byte
}

func (f flip) String() string {
	return fmt.Sprintf("%d bit(s) in batch %v of %s", len(f.offsets), f.batch, filepath.Base(f.path))
}

func (f flip) file() string { return f.path }
func (f flip) undo() error  { return f.apply() }

// apply flips the bits (again).
func (f flip) apply() error {
	file, err := os.OpenFile(f.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer file.Close()
	b := make([]byte, 1)
	for i, off := range f.offsets {
		if _, err := file.ReadAt(b, off); err != nil {
			return err
		}
		b[0] ^= f.masks[i]
		if _, err := file.WriteAt(b, off); err != nil {
			return err
		}
	}
	return file.Sync()
}

// cut is a segment file cut short at position at; tail is what was cut off.
type cut struct {
	path  string
	batch batchInfo
	at    int64
	tail  []byte
}

func (k cut) String() string {
	return fmt.Sprintf("%s cut at byte %d (inside batch %v), %d bytes off", filepath.Base(k.path), k.at, k.batch, len(k.tail))
}

func (k cut) file() string { return k.path }

func (k cut) undo() error {
	f, err := os.OpenFile(k.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(k.tail, k.at)
	return err
}

// heldBatch picks, in node id's (a stopped follower's) segment files of partition 0,
// a batch that the leader's files hold too, not among the newest quarter (clear of
// what the journal may still write out).
func (c *cluster) heldBatch(id, leader int, rng *rand.Rand) (string, batchSpan, error) {
	held := map[batchInfo]bool{}
	leaderBatches, err := readSegments(partitionDir(c.dir, leader, c.topic, 0))
	if err != nil {
		return "", batchSpan{}, fmt.Errorf("leader's segments: %w", err)
	}
	for _, b := range leaderBatches {
		held[b] = true
	}
	files, err := filepath.Glob(filepath.Join(partitionDir(c.dir, id, c.topic, 0), "*.log"))
	if err != nil || len(files) == 0 {
		return "", batchSpan{}, fmt.Errorf("node %d has no segment files of partition 0 (%v)", id, err)
	}
	sort.Strings(files)
	type candidate struct {
		path string
		span batchSpan
	}
	var candidates []candidate
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", batchSpan{}, err
		}
		for _, s := range batchSpans(data) {
			if held[s.batch] && s.next-s.pos > batchHeaderBytes {
				candidates = append(candidates, candidate{path, s})
			}
		}
	}
	if len(candidates) > 10 {
		candidates = candidates[:len(candidates)*3/4]
	}
	if len(candidates) == 0 {
		return "", batchSpan{}, fmt.Errorf("node %d: no batch of partition 0 that the leader holds too", id)
	}
	pick := candidates[rng.IntN(len(candidates))]
	return pick.path, pick.span, nil
}

// flipBits flips one to three bits in the records of a batch heldBatch picks.
func (c *cluster) flipBits(id, leader int, rng *rand.Rand) (damage, error) {
	path, span, err := c.heldBatch(id, leader, rng)
	if err != nil {
		return nil, err
	}
	f := flip{path: path, batch: span.batch}
	records := int64(span.next - span.pos - batchHeaderBytes)
	for n := 1 + rng.IntN(flippedBitsMax); len(f.offsets) < n; {
		off := int64(span.pos+batchHeaderBytes) + rng.Int64N(records)
		if !slices.Contains(f.offsets, off) {
			f.offsets = append(f.offsets, off)
			f.masks = append(f.masks, 1<<rng.IntN(8))
		}
	}
	return f, f.apply()
}

// cutShort cuts the segment file holding a batch heldBatch picks at its start or
// inside it.
func (c *cluster) cutShort(id, leader int, rng *rand.Rand) (damage, error) {
	path, span, err := c.heldBatch(id, leader, rng)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	at := int64(span.pos) + rng.Int64N(int64(span.next-span.pos))
	k := cut{path: path, batch: span.batch, at: at, tail: data[at:]}
	return k, os.Truncate(path, at)
}

// logSize is the size of node id's log, where a later damageFound starts reading.
func (c *cluster) logSize(id int) int64 {
	info, err := os.Stat(c.nodeFile(id, "log"))
	if err != nil {
		return 0
	}
	return info.Size()
}

// damageFound waits until node id's log, past from, says it found a damaged replica
// of the topic (the scrub's or the Raft restore's CRC check); false after timeout.
func (c *cluster) damageFound(ctx context.Context, id int, from int64, timeout time.Duration) bool {
	return c.logShows(ctx, id, from, timeout, "damaged replica", "CRC mismatch", "cut short")
}

// logShows waits until a line of node id's log past from names the topic and one of
// needles; false after timeout.
func (c *cluster) logShows(ctx context.Context, id int, from int64, timeout time.Duration, needles ...string) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(c.nodeFile(id, "log")); err == nil && int64(len(data)) > from {
			for _, line := range bytes.Split(data[from:], []byte("\n")) {
				s := string(line)
				for _, needle := range needles {
					if strings.Contains(s, c.topic) && strings.Contains(s, needle) {
						return true
					}
				}
			}
		}
		if sleep(ctx, 200*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

// rebuilt waits until node id, whose replica of partition 0 was found damaged, has
// deleted it (its log past from says so) and partition 0's leader names it in sync
// again; false after timeout.
func (c *cluster) rebuilt(ctx context.Context, id int, from int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	if !c.logShows(ctx, id, from, timeout, "deleting this replica to rebuild it from its leader") {
		return false
	}
	for time.Now().Before(deadline) {
		for _, asked := range c.nodes() {
			m, err := c.metadata(ctx, asked)
			if err != nil {
				continue
			}
			for _, p := range c.topicOf(m, c.topic).Partitions {
				if p.Partition == 0 && p.Leader == int32(asked) && slices.Contains(p.ISR, int32(id)) {
					return true
				}
			}
		}
		if sleep(ctx, 200*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

// faketimeOffset is node id's current wall-clock offset in seconds (its
// node-<id>/faketime file; 0 when it has none).
func (c *cluster) faketimeOffset(id int) int {
	b, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("node-%d", id), "faketime"))
	if err != nil {
		return 0
	}
	var s int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &s); err != nil {
		return 0
	}
	return s
}

// hasFaketime reports whether node id runs under libfaketime (a step needs it).
func (c *cluster) hasFaketime(id int) bool {
	_, err := os.Stat(filepath.Join(c.dir, fmt.Sprintf("node-%d", id), "faketime"))
	return err == nil
}

// diskFullRound fills the disk of partition 0's leader for -hold, then frees it (and
// restarts the node if the full disk stopped it).
func diskFullRound(ctx context.Context, c *cluster, cfg config, r *faultRound) error {
	r.bound = diskFreedBound
	target := func(view []leaderView) []int {
		id := view[0].leader
		r.parts = nil
		for p, v := range view {
			if p < c.parts && v.leader == id {
				r.parts = append(r.parts, int32(p))
			}
		}
		return []int{int(id)}
	}
	return clusterRound(ctx, c, cfg, target, r, func(id int) error {
		size, err := c.fillDisk(id)
		r.what = fmt.Sprintf("node %d's disk full (%d MiB)", id, size>>20)
		return err
	}, cfg.hold, func(undo context.Context, id int) error {
		want := c.othersLogEnds(id)
		if err := c.freeDisk(id); err != nil {
			return err
		}
		if !c.running(id) {
			r.what += ", node stopped"
			return c.restart(undo, id)
		}
		freed := time.Now()
		if r.stalled = c.awaitWrittenOut(undo, id, want, writtenOutBound); len(r.stalled) > 0 {
			// Restart it, so that later rounds meet a node that writes.
			if err := c.kill(undo, id); err != nil {
				return err
			}
			return c.restart(undo, id)
		}
		r.writtenOutIn = time.Since(freed)
		return nil
	})
}

// othersLogEnds is, per partition, the least log end in the segment files of the
// nodes other than id.
func (c *cluster) othersLogEnds(id int) map[int32]int64 {
	want := map[int32]int64{}
	for p := int32(0); p < int32(c.parts); p++ {
		for _, other := range c.nodes() {
			if other == id {
				continue
			}
			bs, err := readSegments(partitionDir(c.dir, other, c.topic, p))
			if end := logEnd(bs); err == nil {
				if have, ok := want[p]; !ok || end < have {
					want[p] = end
				}
			}
		}
	}
	return want
}

// awaitWrittenOut waits until node id's segment files of each partition reach the log
// ends in want; it returns the partitions that did not within timeout.
func (c *cluster) awaitWrittenOut(ctx context.Context, id int, want map[int32]int64, timeout time.Duration) []int32 {
	deadline := time.Now().Add(timeout)
	for {
		var behind []int32
		for p := int32(0); p < int32(c.parts); p++ {
			bs, err := readSegments(partitionDir(c.dir, id, c.topic, p))
			if err != nil || logEnd(bs) < want[p] {
				behind = append(behind, p)
			}
		}
		if len(behind) == 0 || time.Now().After(deadline) || sleep(ctx, 200*time.Millisecond) != nil {
			return behind
		}
	}
}

// damageRound damages a stopped follower's copy of partition 0 with harm (flipBits
// or cutShort), restarts it, and waits until it finds the damage and its replica is
// rebuilt from the leader.
func damageRound(ctx context.Context, c *cluster, cfg config, r *faultRound, rng *rand.Rand,
	harm func(c *cluster, id, leader int, rng *rand.Rand) (damage, error)) error {
	var leader int
	var done damage
	target := func(view []leaderView) []int {
		leader = int(view[0].leader)
		var followers []int
		for _, id := range c.nodes() {
			if id != leader {
				followers = append(followers, id)
			}
		}
		return []int{followers[rng.IntN(len(followers))]}
	}
	return clusterRound(ctx, c, cfg, target, r, func(id int) error {
		if err := c.kill(ctx, id); err != nil {
			return err
		}
		var err error
		if done, err = harm(c, id, leader, rng); err != nil {
			return err
		}
		r.what = fmt.Sprintf("node %d: %v", id, done)
		from := c.logSize(id)
		restarted := time.Now()
		if err := c.restart(ctx, id); err != nil {
			return err
		}
		bound := damageFoundBound
		if r.class == "cut" {
			// A cut above the last checkpoint is written again from the journal.
			bound = cutFoundBound
		}
		if !c.damageFound(ctx, id, from, bound) {
			if r.class == "cut" {
				r.rewritten = true
				return sleep(ctx, cfg.hold)
			}
			r.undetected = true
			return nil
		}
		r.foundIn = time.Since(restarted)
		// Still led by a healthy replica, in the leader's view and the damaged node's.
		for _, asked := range []int{leader, id} {
			if v, err := c.viewAll(ctx, asked); err == nil && int(v[0].leader) == id {
				r.damagedLeader = true
			}
		}
		found := time.Now()
		if !c.rebuilt(ctx, id, from, rebuildBound) {
			r.notRebuilt = true
			return nil
		}
		r.rebuiltIn = time.Since(found)
		return sleep(ctx, cfg.hold)
	}, 0, func(undo context.Context, id int) error {
		if (r.rebuiltIn > 0 || r.rewritten) && c.running(id) {
			return nil
		}
		if c.running(id) {
			if err := c.kill(undo, id); err != nil {
				return err
			}
		}
		if done != nil && r.rebuiltIn == 0 && !r.rewritten {
			if err := done.undo(); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("restoring %s: %w", done.file(), err)
			}
		}
		return c.restart(undo, id)
	})
}

// stepRound steps the wall clock of partition 0's leader by step seconds while it
// runs, holds -hold, and steps it back.
func stepRound(ctx context.Context, c *cluster, cfg config, r *faultRound, step int) error {
	if step == 0 {
		step = 1
	}
	var base int
	return clusterRound(ctx, c, cfg, func(view []leaderView) []int { return []int{int(view[0].leader)} }, r, func(id int) error {
		if !c.hasFaketime(id) {
			return fmt.Errorf("node %d does not run under libfaketime (no node-%d/faketime)", id, id)
		}
		base = c.faketimeOffset(id)
		r.what = fmt.Sprintf("node %d stepped %+ds", id, step)
		return c.skew(id, base+step)
	}, cfg.hold, func(_ context.Context, id int) error { return c.skew(id, base) })
}

//! Idempotent producer state: for each producer id seen on a partition, its epoch and
//! its last five batches' sequence ranges, as Kafka keeps them. No I/O; time comes from
//! an injected clock.
//!
//! A retried batch inside the window is answered with its original offsets and never
//! appended twice, and never answered OUT_OF_ORDER_SEQUENCE_NUMBER.
//!
//! **Bounds.** A producer id is eight bytes a client chooses, so a client can make the
//! broker remember as many as it sends batches. All partitions of a shard keep their
//! producers in one table, [`ShardProducers`], with two caps: per partition
//! (`producer_states_per_partition_max`) and per shard
//! (`producer_states_per_shard_max`). A new producer past either cap evicts the least
//! recently used one (of that partition, or of the whole shard). Independently, a
//! producer idle for `producer_id_expiration_ms` is removed, as Kafka's
//! `producer.id.expiration.ms` does (one day by default in both).
//!
//! An evicted or expired producer is unknown, and an unknown producer is treated as
//! Kafka 4 treats one whose state is gone (`ProducerAppendInfo.checkSequence`: no
//! current epoch, so any sequence is accepted): its next batch is appended whatever
//! its sequence, and a new epoch must start at sequence 0 only while the old epoch is
//! known. The price of eviction is Kafka's price of expiration: a retry of a batch sent
//! before the eviction is appended again. Kafka brokers no longer answer
//! UNKNOWN_PRODUCER_ID to a produce (KIP-360), and neither does Keel.
//!
//! Why one table per shard rather than a map per partition: the shard cap must find
//! the least recently used producer among all partitions without scanning them, and
//! one ordered index over the shard does that in O(log n).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Batches remembered per producer: Kafka clients keep at most five in flight.
pub const BATCHES_PER_PRODUCER_MAX: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeqBatch {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    /// The batch's max timestamp (DescribeProducers' last timestamp).
    pub max_timestamp: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    Append,
    /// A retry of a batch already appended: its first offset and its max timestamp,
    /// which Kafka answers as the log append time of a retried batch.
    Duplicate {
        base_offset: i64,
        max_timestamp: i64,
    },
    OutOfOrder {
        expected: i32,
    },
    FencedEpoch {
        current: i16,
    },
}

/// The caps of a shard's producer table and the idle time after which a producer goes.
#[derive(Debug, Clone, Copy)]
pub struct ProducerLimits {
    pub per_partition_max: usize,
    pub per_shard_max: usize,
    pub expiration_ms: i64,
}

/// The last five batches of one producer, oldest first, kept inline (no allocation
/// per producer beyond its table entry).
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    batches: [SeqBatch; BATCHES_PER_PRODUCER_MAX],
    len: u8,
    start: u8,
}

impl Window {
    fn iter(&self) -> impl Iterator<Item = &SeqBatch> {
        (0..self.len as usize).map(|i| &self.batches[(self.start as usize + i) % BATCHES_PER_PRODUCER_MAX])
    }

    fn back(&self) -> Option<&SeqBatch> {
        self.iter().last()
    }

    fn push(&mut self, b: SeqBatch) {
        // Batches come in log order; one at or below the last is a replay of it (a
        // replicated log's leader records a batch when it proposes it and again when
        // it writes it).
        if self.back().is_some_and(|last| last.base_offset >= b.base_offset) {
            return;
        }
        if (self.len as usize) < BATCHES_PER_PRODUCER_MAX {
            self.batches[(self.start as usize + self.len as usize) % BATCHES_PER_PRODUCER_MAX] = b;
            self.len += 1;
        } else {
            self.batches[self.start as usize] = b;
            self.start = ((self.start as usize + 1) % BATCHES_PER_PRODUCER_MAX) as u8;
        }
    }

    fn clear(&mut self) {
        self.len = 0;
        self.start = 0;
    }

    /// Forgets the batches at or after `offset`.
    fn truncate_from(&mut self, offset: i64) {
        let kept: Vec<SeqBatch> = self.iter().filter(|b| b.base_offset < offset).copied().collect();
        self.clear();
        for b in kept {
            self.push(b);
        }
    }
}

#[derive(Debug)]
struct Entry {
    epoch: i16,
    window: Window,
    /// The max timestamp of its last batch or marker here.
    last_timestamp: i64,
    last_used_ms: i64,
    /// Position in the use order (larger = more recent); unique within the shard.
    stamp: u64,
}

/// (partition table, producer id).
type Key = (u64, i64);

#[derive(Default)]
struct Tables {
    entries: HashMap<Key, Entry>,
    /// Shard-wide use order: stamp → producer, oldest first.
    by_use: BTreeMap<u64, Key>,
    /// Per partition table, its use order: stamp → producer id.
    per_table: HashMap<u64, BTreeMap<u64, i64>>,
    next_stamp: u64,
    next_table: u64,
}

impl Tables {
    fn remove(&mut self, key: Key) -> Option<Entry> {
        let entry = self.entries.remove(&key)?;
        self.by_use.remove(&entry.stamp);
        if let Some(order) = self.per_table.get_mut(&key.0) {
            order.remove(&entry.stamp);
        }
        Some(entry)
    }

    fn touch(&mut self, key: Key, now_ms: i64) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let entry = self.entries.get_mut(&key).expect("touched producer exists");
        let old = std::mem::replace(&mut entry.stamp, stamp);
        entry.last_used_ms = now_ms;
        self.by_use.remove(&old);
        self.by_use.insert(stamp, key);
        let order = self.per_table.entry(key.0).or_default();
        order.remove(&old);
        order.insert(stamp, key.1);
    }
}

/// Every producer state of one shard's partitions, with the shard's caps.
pub struct ShardProducers {
    limits: ProducerLimits,
    tables: RefCell<Tables>,
    clock: Box<dyn Fn() -> i64>,
    evicted: Cell<u64>,
    expired: Cell<u64>,
}

impl ShardProducers {
    pub fn new(limits: ProducerLimits, clock: Box<dyn Fn() -> i64>) -> Rc<ShardProducers> {
        assert!(limits.per_partition_max >= 1 && limits.per_shard_max >= 1, "producer caps must be at least 1");
        Rc::new(ShardProducers {
            limits,
            tables: RefCell::new(Tables::default()),
            clock,
            evicted: Cell::new(0),
            expired: Cell::new(0),
        })
    }

    pub fn limits(&self) -> ProducerLimits {
        self.limits
    }

    /// Producer states held by all the shard's partitions.
    pub fn in_use(&self) -> usize {
        self.tables.borrow().entries.len()
    }

    /// Producers evicted by a cap (partition or shard), since start.
    pub fn evicted_total(&self) -> u64 {
        self.evicted.get()
    }

    /// Producers removed after `expiration_ms` idle, since start.
    pub fn expired_total(&self) -> u64 {
        self.expired.get()
    }

    /// Removes every producer idle for `expiration_ms` or longer; returns how many.
    pub fn expire(&self) -> usize {
        let now = (self.clock)();
        let mut t = self.tables.borrow_mut();
        let mut removed = 0;
        // The use order follows the clock, so the idle ones are at the front. (A clock
        // stepped back only delays an expiry to a later sweep.)
        while let Some((_, &key)) = t.by_use.first_key_value() {
            let idle = now - t.entries[&key].last_used_ms;
            if idle < self.limits.expiration_ms {
                break;
            }
            t.remove(key);
            removed += 1;
        }
        self.expired.set(self.expired.get() + removed as u64);
        removed
    }
}

/// One partition's view of its shard's producer table. Dropping it (the partition
/// closed or deleted) removes its producers.
pub struct ProducerStates {
    table: u64,
    shard: Rc<ShardProducers>,
}

impl ProducerStates {
    pub fn new(shard: &Rc<ShardProducers>) -> ProducerStates {
        let mut t = shard.tables.borrow_mut();
        let table = t.next_table;
        t.next_table += 1;
        ProducerStates { table, shard: shard.clone() }
    }

    /// Producers this partition remembers.
    pub fn len(&self) -> usize {
        self.shard.tables.borrow().per_table.get(&self.table).map_or(0, |o| o.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The epoch of `producer_id`'s last batch here, if it is remembered.
    pub fn epoch(&self, producer_id: i64) -> Option<i16> {
        self.shard.tables.borrow().entries.get(&(self.table, producer_id)).map(|e| e.epoch)
    }

    pub fn check(&self, producer_id: i64, epoch: i16, first_seq: i32, last_seq: i32) -> SeqCheck {
        let t = self.shard.tables.borrow();
        let Some(entry) = t.entries.get(&(self.table, producer_id)) else {
            // Unknown producer (new, evicted or expired): accept, like Kafka.
            return SeqCheck::Append;
        };
        if epoch < entry.epoch {
            return SeqCheck::FencedEpoch { current: entry.epoch };
        }
        if epoch > entry.epoch {
            return if first_seq == 0 { SeqCheck::Append } else { SeqCheck::OutOfOrder { expected: 0 } };
        }
        if let Some(b) = entry.window.iter().find(|b| b.first_seq == first_seq && b.last_seq == last_seq) {
            return SeqCheck::Duplicate { base_offset: b.base_offset, max_timestamp: b.max_timestamp };
        }
        let expected = match entry.window.back() {
            Some(b) if b.last_seq == i32::MAX => 0,
            Some(b) => b.last_seq + 1,
            None => return SeqCheck::Append,
        };
        if first_seq == expected {
            SeqCheck::Append
        } else {
            SeqCheck::OutOfOrder { expected }
        }
    }

    /// Remembers an appended batch. A producer new to the table may evict the least
    /// recently used one of this partition or of the shard.
    pub fn record(&mut self, producer_id: i64, epoch: i16, batch: SeqBatch) {
        let now = (self.shard.clock)();
        let limits = self.shard.limits;
        let mut t = self.shard.tables.borrow_mut();
        let key = (self.table, producer_id);
        if !t.entries.contains_key(&key) {
            self.admit(&mut t, key, epoch, now);
        }
        let entry = t.entries.get_mut(&key).expect("inserted above");
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.window.clear();
        }
        entry.last_timestamp = batch.max_timestamp;
        entry.window.push(batch);
        t.touch(key, now);
        assert!(t.entries.len() <= limits.per_shard_max, "producer states exceed the shard cap");
    }

    /// Starts the state of a producer new to the table, evicting the least recently
    /// used one of this partition or of the shard when a cap is reached.
    fn admit(&self, t: &mut Tables, key: Key, epoch: i16, now: i64) {
        let limits = self.shard.limits;
        let mut evicted = 0;
        if t.per_table.get(&self.table).map_or(0, |o| o.len()) >= limits.per_partition_max {
            let oldest = t.per_table[&self.table].first_key_value().map(|(_, &pid)| pid);
            if let Some(pid) = oldest {
                t.remove((self.table, pid));
                evicted += 1;
            }
        }
        if t.entries.len() >= limits.per_shard_max {
            if let Some((_, &oldest)) = t.by_use.first_key_value() {
                t.remove(oldest);
                evicted += 1;
            }
        }
        self.shard.evicted.set(self.shard.evicted.get() + evicted);
        let entry = Entry { epoch, window: Window::default(), last_timestamp: -1, last_used_ms: now, stamp: u64::MAX };
        t.entries.insert(key, entry);
    }
}

impl ProducerStates {
    /// Every producer this partition remembers: (id, epoch, last sequence, max
    /// timestamp of its last batch or marker), for DescribeProducers.
    pub fn describe(&self) -> Vec<(i64, i16, i32, i64)> {
        let t = self.shard.tables.borrow();
        let Some(order) = t.per_table.get(&self.table) else { return Vec::new() };
        order
            .values()
            .filter_map(|pid| {
                let e = t.entries.get(&(self.table, *pid))?;
                Some((*pid, e.epoch, e.window.back().map_or(-1, |b| b.last_seq), e.last_timestamp))
            })
            .collect()
    }

    /// A transaction marker of `epoch`, stamped `timestamp`, was appended: a newer
    /// epoch becomes the producer's, so batches of older ones are fenced, and its
    /// sequences start again.
    ///
    /// A marker of a producer the partition has no state for (it never wrote here, or
    /// its state went) starts one, as Kafka's producer state manager does: a marker
    /// or batch of an older epoch is then fenced.
    pub fn end_epoch(&mut self, producer_id: i64, epoch: i16, timestamp: i64) {
        let now = (self.shard.clock)();
        let mut t = self.shard.tables.borrow_mut();
        let key = (self.table, producer_id);
        if !t.entries.contains_key(&key) {
            self.admit(&mut t, key, epoch, now);
            t.touch(key, now);
        }
        let entry = t.entries.get_mut(&key).expect("admitted above");
        entry.last_timestamp = timestamp;
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.window.clear();
        }
    }

    /// The log was cut back to `offset` (a deposed leader's uncommitted tail, replaced
    /// by its new leader's): the batches it held are forgotten, and a producer left
    /// with none becomes unknown. Otherwise a retry of a batch that is no longer in the
    /// log would be answered as a duplicate, and lost.
    pub fn truncate_from(&mut self, offset: i64) {
        let mut t = self.shard.tables.borrow_mut();
        let producers: Vec<i64> =
            t.per_table.get(&self.table).map(|o| o.values().copied().collect()).unwrap_or_default();
        for pid in producers {
            let key = (self.table, pid);
            let Some(entry) = t.entries.get_mut(&key) else { continue };
            entry.window.truncate_from(offset);
            if entry.window.len == 0 {
                t.remove(key);
            }
        }
    }
}

impl Drop for ProducerStates {
    fn drop(&mut self) {
        let mut t = self.shard.tables.borrow_mut();
        if let Some(order) = t.per_table.remove(&self.table) {
            for (stamp, pid) in order {
                t.entries.remove(&(self.table, pid));
                t.by_use.remove(&stamp);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(first: i32, last: i32, off: i64) -> SeqBatch {
        let last_offset = off + (last - first) as i64;
        SeqBatch { first_seq: first, last_seq: last, base_offset: off, last_offset, max_timestamp: 0 }
    }

    fn shard(per_partition_max: usize, per_shard_max: usize) -> (Rc<ShardProducers>, Rc<Cell<i64>>) {
        let now = Rc::new(Cell::new(1_000));
        let clock = now.clone();
        let limits = ProducerLimits { per_partition_max, per_shard_max, expiration_ms: 60_000 };
        (ShardProducers::new(limits, Box::new(move || clock.get())), now)
    }

    fn states() -> ProducerStates {
        ProducerStates::new(&shard(100, 1000).0)
    }

    #[test]
    fn in_order_duplicate_and_gap() {
        let mut s = states();
        assert_eq!(s.check(7, 0, 0, 4), SeqCheck::Append);
        s.record(7, 0, b(0, 4, 100));
        assert_eq!(s.check(7, 0, 5, 9), SeqCheck::Append);
        s.record(7, 0, b(5, 9, 105));
        assert!(matches!(s.check(7, 0, 0, 4), SeqCheck::Duplicate { base_offset: 100, .. }));
        assert!(matches!(s.check(7, 0, 5, 9), SeqCheck::Duplicate { base_offset: 105, .. }));
        assert_eq!(s.check(7, 0, 12, 13), SeqCheck::OutOfOrder { expected: 10 });
    }

    #[test]
    fn window_is_five_batches() {
        let mut s = states();
        for i in 0..6 {
            s.record(1, 0, b(i, i, i as i64));
        }
        assert_eq!(s.check(1, 0, 0, 0), SeqCheck::OutOfOrder { expected: 6 });
        assert!(matches!(s.check(1, 0, 1, 1), SeqCheck::Duplicate { base_offset: 1, .. }));
        assert!(matches!(s.check(1, 0, 5, 5), SeqCheck::Duplicate { base_offset: 5, .. }));
    }

    #[test]
    fn epochs() {
        let mut s = states();
        s.record(1, 3, b(0, 0, 0));
        assert_eq!(s.check(1, 2, 1, 1), SeqCheck::FencedEpoch { current: 3 });
        assert_eq!(s.check(1, 4, 5, 5), SeqCheck::OutOfOrder { expected: 0 });
        assert_eq!(s.check(1, 4, 0, 0), SeqCheck::Append);
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut s = states();
        s.record(1, 0, b(i32::MAX - 1, i32::MAX, 0));
        assert_eq!(s.check(1, 0, 0, 3), SeqCheck::Append);
    }

    #[test]
    fn partition_cap_evicts_its_least_recently_used_producer() {
        let (shard, _) = shard(3, 1000);
        let mut s = ProducerStates::new(&shard);
        for pid in 1..=3 {
            s.record(pid, 0, b(0, 0, pid));
        }
        // Producer 1 writes again: producer 2 is now the least recently used.
        s.record(1, 0, b(1, 1, 10));
        s.record(4, 0, b(0, 0, 11));
        assert_eq!(s.len(), 3);
        assert_eq!(shard.evicted_total(), 1);
        assert!(matches!(s.check(1, 0, 1, 1), SeqCheck::Duplicate { base_offset: 10, .. }));
        // Producer 2 is unknown now: a retry of its old batch is accepted again, and
        // so is any later sequence, as Kafka does for a producer whose state is gone.
        assert_eq!(s.check(2, 0, 0, 0), SeqCheck::Append);
        assert_eq!(s.check(2, 0, 7, 7), SeqCheck::Append);
        assert!(matches!(s.check(3, 0, 0, 0), SeqCheck::Duplicate { base_offset: 3, .. }));
    }

    #[test]
    fn shard_cap_evicts_across_partitions() {
        let (shard, _) = shard(100, 4);
        let mut a = ProducerStates::new(&shard);
        let mut c = ProducerStates::new(&shard);
        for pid in 0..3 {
            a.record(pid, 0, b(0, 0, pid));
        }
        c.record(10, 0, b(0, 0, 0));
        c.record(11, 0, b(0, 0, 1));
        assert_eq!(shard.in_use(), 4);
        assert_eq!(a.len(), 2, "the shard's oldest producer was partition a's first");
        assert_eq!(a.check(0, 0, 0, 0), SeqCheck::Append);
        assert!(matches!(a.check(1, 0, 0, 0), SeqCheck::Duplicate { base_offset: 1, .. }));
        assert_eq!(shard.evicted_total(), 1);
        drop(a);
        assert_eq!(shard.in_use(), 2, "a dropped partition takes its producers with it");
    }

    #[test]
    fn a_million_producers_stay_within_the_caps() {
        let (shard, _) = shard(10_000, 25_000);
        let mut parts: Vec<ProducerStates> = (0..4).map(|_| ProducerStates::new(&shard)).collect();
        for pid in 0..1_000_000i64 {
            parts[(pid % 4) as usize].record(pid, 0, b(0, 0, pid));
        }
        assert_eq!(shard.in_use(), 25_000);
        assert!(parts.iter().all(|p| p.len() <= 10_000));
        assert_eq!(shard.evicted_total(), 975_000);
    }

    #[test]
    fn idle_producers_expire() {
        let (shard, now) = shard(100, 1000);
        let mut s = ProducerStates::new(&shard);
        s.record(1, 0, b(0, 0, 0));
        now.set(now.get() + 30_000);
        s.record(2, 0, b(0, 0, 1));
        now.set(now.get() + 30_000);
        assert_eq!(shard.expire(), 1);
        assert_eq!(s.check(1, 0, 5, 5), SeqCheck::Append, "expired: unknown again");
        assert!(matches!(s.check(2, 0, 0, 0), SeqCheck::Duplicate { base_offset: 1, .. }));
        now.set(now.get() + 30_000);
        assert_eq!(shard.expire(), 1);
        assert_eq!((shard.in_use(), shard.expired_total()), (0, 2));
    }

    #[test]
    fn a_truncated_tail_is_forgotten() {
        let mut s = states();
        s.record(7, 0, b(0, 4, 100));
        s.record(7, 0, b(5, 9, 105));
        s.record(8, 0, b(0, 0, 110));
        s.truncate_from(105);
        // The batch cut from the log is appended again when retried, not acknowledged
        // as a duplicate of something the log no longer has.
        assert_eq!(s.check(7, 0, 5, 9), SeqCheck::Append);
        assert!(matches!(s.check(7, 0, 0, 4), SeqCheck::Duplicate { base_offset: 100, .. }));
        assert_eq!(s.len(), 1, "a producer whose batches were all cut is unknown");
        assert_eq!(s.check(8, 0, 0, 0), SeqCheck::Append);
    }
}

//! Transactions as one partition's log sees them: which producers have a transaction
//! open here and where it began, which ended in an abort (Kafka's aborted-transaction
//! index), and the last stable offset (LSO) that `read_committed` consumers read up to.
//! No I/O: the partition feeds it the batches it appends and persists what it returns.
//!
//! **The LSO** is the first offset of the earliest transaction not yet known to be
//! decided, or the high watermark when there is none. A transaction counts as decided
//! only once its marker is below the high watermark: on a replicated partition a
//! marker written but not committed can still be cut from the log with the tail a new
//! leader replaces, and the transaction it ended is then open again. So a transaction
//! whose marker is written stays in `ended` until the high watermark passes it, and a
//! truncation brings it back to `open`.
//!
//! **Aborted ranges** are kept per marker offset: a fetch from offset `f` whose data
//! ends before `u` is told of every aborted transaction with a marker at or after `f`
//! that began before `u`, as Kafka's `collectAbortedTransactions` does, so the client
//! drops those records.

use std::collections::{BTreeMap, HashMap};

use keel_protocol::batch::{marker_type, BatchHeader, CONTROL_ABORT};

/// One aborted transaction of one producer on this partition: its first offset here
/// and its abort marker's offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// What an appended batch changed, for the partition to persist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnChange {
    /// A producer's first transactional batch on this partition since its last marker.
    Begun { producer_id: i64, first_offset: i64 },
    /// A marker ended a producer's transaction; `aborted` when it was an abort.
    Ended { producer_id: i64, aborted: Option<AbortedTxn> },
}

#[derive(Debug, Clone, Copy)]
struct Ended {
    producer_id: i64,
    first_offset: i64,
    marker: i64,
}

#[derive(Debug, Default)]
pub struct PartitionTxns {
    /// Producer id → first offset of its transaction without a marker yet.
    open: HashMap<i64, i64>,
    /// Transactions whose marker is written but maybe not below the high watermark.
    ended: Vec<Ended>,
    /// Aborted transactions by marker offset.
    aborted: BTreeMap<i64, AbortedTxn>,
}

impl PartitionTxns {
    /// State as persisted: the open transactions' first offsets and the aborted ones.
    pub fn restore(open: impl IntoIterator<Item = (i64, i64)>, aborted: impl IntoIterator<Item = AbortedTxn>) -> Self {
        PartitionTxns {
            open: open.into_iter().collect(),
            ended: Vec::new(),
            aborted: aborted.into_iter().map(|a| (a.last_offset, a)).collect(),
        }
    }

    /// Takes in one appended batch (`bytes` is the whole batch, for a marker's type).
    pub fn on_batch(&mut self, h: &BatchHeader, bytes: &[u8]) -> Option<TxnChange> {
        if !h.is_transactional() || !h.has_producer_id() {
            return None;
        }
        let producer_id = h.producer_id;
        if !h.is_control() {
            if self.open.contains_key(&producer_id) {
                return None;
            }
            self.open.insert(producer_id, h.base_offset);
            return Some(TxnChange::Begun { producer_id, first_offset: h.base_offset });
        }
        let kind = marker_type(bytes)?;
        // A marker for a producer with no data here (a partition added to the
        // transaction but never written, or a marker written again) ends nothing.
        let first_offset = self.open.remove(&producer_id)?;
        self.ended.push(Ended { producer_id, first_offset, marker: h.base_offset });
        let aborted = (kind == CONTROL_ABORT).then(|| {
            let a = AbortedTxn { producer_id, first_offset, last_offset: h.base_offset };
            self.aborted.insert(a.last_offset, a);
            a
        });
        Some(TxnChange::Ended { producer_id, aborted })
    }

    /// The last stable offset under high watermark `hw`.
    pub fn last_stable_offset(&mut self, hw: i64) -> i64 {
        self.ended.retain(|e| e.marker >= hw);
        let open = self.open.values().copied();
        open.chain(self.ended.iter().map(|e| e.first_offset)).fold(hw, i64::min)
    }

    /// The first offset of `producer_id`'s open transaction here, if it has one.
    pub fn open_since(&self, producer_id: i64) -> Option<i64> {
        self.open.get(&producer_id).copied()
    }

    /// Producers with a transaction open here, with its first offset.
    pub fn open_transactions(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.open.iter().map(|(p, o)| (*p, *o))
    }

    /// Aborted transactions a fetch from `from` returning data below `upto` must name.
    pub fn aborted_between(&self, from: i64, upto: i64) -> Vec<AbortedTxn> {
        self.aborted.range(from..).map(|(_, a)| *a).filter(|a| a.first_offset < upto).collect()
    }

    /// The log was cut back to `offset`: what began at or after it is gone, and a
    /// transaction whose marker was cut is open again. An abort is found in the aborted
    /// ranges too: after a restart `ended` is empty, and an abort whose marker a new
    /// leader's tail replaced would otherwise end nothing when that leader's marker
    /// arrives, leaving the aborted records readable as committed.
    pub fn truncate_from(&mut self, offset: i64) {
        self.open.retain(|_, first| *first < offset);
        let (cut, kept): (Vec<Ended>, Vec<Ended>) = self.ended.drain(..).partition(|e| e.marker >= offset);
        self.ended = kept;
        let cut_aborts = self.aborted.split_off(&offset).into_values().map(|a| (a.producer_id, a.first_offset));
        let cut = cut.into_iter().map(|e| (e.producer_id, e.first_offset)).chain(cut_aborts);
        for (producer_id, first_offset) in cut.filter(|(_, first)| *first < offset) {
            self.open.insert(producer_id, first_offset);
        }
    }

    /// Forgets aborted transactions wholly below the log start offset; returns their
    /// marker offsets (for the persisted index).
    pub fn drop_below(&mut self, log_start: i64) -> Vec<i64> {
        let gone: Vec<i64> = self.aborted.range(..log_start).map(|(k, _)| *k).collect();
        for k in &gone {
            self.aborted.remove(k);
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use keel_protocol::batch::{build_batch_as, build_marker, validate, Producer, ATTR_TRANSACTIONAL};

    use super::*;

    fn data(pid: i64, base: i64, count: usize) -> (BatchHeader, Bytes) {
        let records: Vec<_> = (0..count).map(|_| (Some(&b"k"[..]), Some(&b"v"[..]))).collect();
        let b = build_batch_as(base, 1, Producer { id: pid, epoch: 0, base_sequence: 0 }, ATTR_TRANSACTIONAL, &records);
        let mut h = validate(&b).unwrap();
        h.base_offset = base;
        (h, b)
    }

    fn marker(pid: i64, at: i64, commit: bool) -> (BatchHeader, Bytes) {
        let b = build_marker(pid, 0, commit, 0, 1);
        let mut h = validate(&b).unwrap();
        h.base_offset = at;
        (h, b)
    }

    #[test]
    fn the_lso_stops_at_the_first_undecided_transaction() {
        let mut t = PartitionTxns::default();
        let (h, b) = data(7, 10, 3);
        assert_eq!(t.on_batch(&h, &b), Some(TxnChange::Begun { producer_id: 7, first_offset: 10 }));
        let (h, b) = data(7, 13, 2);
        assert_eq!(t.on_batch(&h, &b), None);
        let (h, b) = data(8, 15, 1);
        t.on_batch(&h, &b);
        assert_eq!(t.last_stable_offset(16), 10);
        assert_eq!(t.last_stable_offset(5), 5, "never past the high watermark");
        let (h, b) = marker(7, 16, true);
        assert_eq!(t.on_batch(&h, &b), Some(TxnChange::Ended { producer_id: 7, aborted: None }));
        assert_eq!(t.last_stable_offset(16), 10, "the marker is not below the high watermark yet");
        assert_eq!(t.last_stable_offset(17), 15, "producer 8 is still open");
        let (h, b) = marker(8, 17, false);
        t.on_batch(&h, &b);
        assert_eq!(t.last_stable_offset(18), 18);
        assert_eq!(t.aborted_between(0, 18), vec![AbortedTxn { producer_id: 8, first_offset: 15, last_offset: 17 }]);
        assert!(t.aborted_between(18, 30).is_empty(), "ended before the fetch");
        assert!(t.aborted_between(0, 15).is_empty(), "begins after the data returned");
    }

    #[test]
    fn a_cut_marker_reopens_its_transaction_and_a_cut_start_forgets_it() {
        let mut t = PartitionTxns::default();
        let (h, b) = data(1, 0, 2);
        t.on_batch(&h, &b);
        let (h, b) = marker(1, 2, false);
        t.on_batch(&h, &b);
        let (h, b) = data(2, 3, 1);
        t.on_batch(&h, &b);
        t.truncate_from(2);
        assert_eq!(t.open_since(1), Some(0));
        assert_eq!(t.open_since(2), None);
        assert!(t.aborted_between(0, 10).is_empty());
        assert_eq!(t.last_stable_offset(2), 0);
    }

    #[test]
    fn a_cut_abort_marker_reopens_its_transaction_after_a_restart() {
        // Restored from the state store: the abort at 2 is known, `ended` is not.
        let mut t = PartitionTxns::restore([], [AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 2 }]);
        t.truncate_from(2);
        assert_eq!(t.open_since(1), Some(0), "the abort's marker was cut: open again");
        assert!(t.aborted_between(0, 10).is_empty());
        // The new leader's abort marker ends it, and the range is known again.
        let (h, b) = marker(1, 3, false);
        let ended = t.on_batch(&h, &b);
        let range = AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 3 };
        assert_eq!(ended, Some(TxnChange::Ended { producer_id: 1, aborted: Some(range) }));
        assert_eq!(t.aborted_between(0, 10), vec![range]);
    }

    #[test]
    fn aborted_ranges_below_the_log_start_are_dropped() {
        let mut t = PartitionTxns::restore([], [AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 4 }]);
        assert_eq!(t.drop_below(4), Vec::<i64>::new());
        assert_eq!(t.drop_below(5), vec![4]);
        assert!(t.aborted_between(0, 100).is_empty());
    }
}

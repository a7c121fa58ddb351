//! The last few batch headers of every producer id in a log.
//!
//! The broker rebuilds idempotent-producer state (epoch and last five sequence ranges)
//! from batch headers it sees at open. Two storage paths would otherwise hide those
//! headers from it: a clean restart that skips the recovery scan, and compaction that
//! removes whole batches. Both consult this tail: the clean-shutdown checkpoint stores
//! it and replays it at open, and compaction keeps an emptied batch (header only, as
//! Kafka does) while it is one of its producer's recent batches.
//!
//! Memory is bounded: past `PRODUCERS_TRACKED_MAX` producers the ones idle longest
//! (smallest last offset) are forgotten, a tenth at a time so appends stay O(1)
//! amortized. A forgotten producer is treated by the broker as new, as Kafka does
//! after `producer.id.expiration.ms`.

use std::collections::{HashMap, VecDeque};

use keel_protocol::batch::BatchHeader;

/// Batches remembered per producer: Kafka clients keep at most five in flight.
pub const BATCHES_PER_PRODUCER_MAX: usize = 5;
/// Producer ids remembered per partition.
pub const PRODUCERS_TRACKED_MAX: usize = 10_000;

#[derive(Debug, Default, Clone)]
pub struct ProducerTail {
    producers: HashMap<i64, VecDeque<BatchHeader>>,
}

impl ProducerTail {
    pub fn note(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() {
            return;
        }
        let batches = self.producers.entry(h.producer_id).or_default();
        if batches.back().map(|b| b.producer_epoch != h.producer_epoch).unwrap_or(false) {
            batches.clear();
        }
        batches.push_back(*h);
        if batches.len() > BATCHES_PER_PRODUCER_MAX {
            batches.pop_front();
        }
        if self.producers.len() > PRODUCERS_TRACKED_MAX {
            self.forget_idlest(PRODUCERS_TRACKED_MAX / 10);
        }
    }

    fn forget_idlest(&mut self, count: usize) {
        let mut by_last: Vec<(i64, i64)> =
            self.producers.iter().map(|(id, b)| (b.back().map(|h| h.base_offset).unwrap_or(-1), *id)).collect();
        by_last.sort_unstable();
        for (_, id) in by_last.into_iter().take(count) {
            self.producers.remove(&id);
        }
    }

    /// True when the batch at `base_offset` is one of its producer's remembered ones.
    pub fn is_recent(&self, producer_id: i64, base_offset: i64) -> bool {
        self.producers.get(&producer_id).map(|b| b.iter().any(|h| h.base_offset == base_offset)).unwrap_or(false)
    }

    /// Forgets batches at or after `offset` (the log was truncated there).
    pub fn truncate(&mut self, offset: i64) {
        self.producers.retain(|_, batches| {
            batches.retain(|h| h.base_offset < offset);
            !batches.is_empty()
        });
    }

    /// Every remembered header, in log order, for replay at open.
    pub fn headers(&self) -> Vec<BatchHeader> {
        let mut all: Vec<BatchHeader> = self.producers.values().flatten().copied().collect();
        all.sort_unstable_by_key(|h| h.base_offset);
        all
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(producer_id: i64, epoch: i16, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: 0,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: epoch,
            base_sequence: base_offset as i32,
            records_count: 1,
        }
    }

    #[test]
    fn keeps_five_per_producer_and_resets_on_epoch() {
        let mut t = ProducerTail::default();
        for o in 0..8 {
            t.note(&header(1, 0, o));
        }
        assert!(!t.is_recent(1, 2));
        assert!(t.is_recent(1, 3) && t.is_recent(1, 7));
        t.note(&header(1, 1, 8));
        assert_eq!(t.headers().len(), 1);
        t.truncate(8);
        assert!(t.is_empty());
    }

    #[test]
    fn forgets_idlest_producers_past_the_bound() {
        let mut t = ProducerTail::default();
        for id in 0..(PRODUCERS_TRACKED_MAX as i64 + 1) {
            t.note(&header(id, 0, id));
        }
        assert!(t.len() <= PRODUCERS_TRACKED_MAX);
        assert!(!t.is_recent(0, 0));
        assert!(t.is_recent(PRODUCERS_TRACKED_MAX as i64, PRODUCERS_TRACKED_MAX as i64));
    }
}

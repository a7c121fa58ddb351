//! Idempotent producer state of one partition: for each producer id, its epoch and its
//! last five batches' sequence ranges, as Kafka keeps them. Pure: no I/O, no clock.
//!
//! A retried batch inside the window is answered with its original offsets and never
//! appended twice, and never answered OUT_OF_ORDER_SEQUENCE_NUMBER.

use std::collections::{HashMap, VecDeque};

/// Batches remembered per producer: Kafka clients keep at most five in flight.
pub const BATCHES_PER_PRODUCER_MAX: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqBatch {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, Default)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<SeqBatch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    Append,
    Duplicate { base_offset: i64 },
    OutOfOrder { expected: i32 },
    FencedEpoch { current: i16 },
}

#[derive(Debug, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStates {
    pub fn check(&self, producer_id: i64, epoch: i16, first_seq: i32, last_seq: i32) -> SeqCheck {
        let Some(entry) = self.producers.get(&producer_id) else {
            // Unknown producer (new, or its state was removed): accept, like Kafka.
            return SeqCheck::Append;
        };
        if epoch < entry.epoch {
            return SeqCheck::FencedEpoch { current: entry.epoch };
        }
        if epoch > entry.epoch {
            return if first_seq == 0 { SeqCheck::Append } else { SeqCheck::OutOfOrder { expected: 0 } };
        }
        if let Some(b) = entry.batches.iter().find(|b| b.first_seq == first_seq && b.last_seq == last_seq) {
            return SeqCheck::Duplicate { base_offset: b.base_offset };
        }
        let expected = match entry.batches.back() {
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

    pub fn record(&mut self, producer_id: i64, epoch: i16, batch: SeqBatch) {
        let entry = self.producers.entry(producer_id).or_default();
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(batch);
        if entry.batches.len() > BATCHES_PER_PRODUCER_MAX {
            entry.batches.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(first: i32, last: i32, off: i64) -> SeqBatch {
        SeqBatch { first_seq: first, last_seq: last, base_offset: off, last_offset: off + (last - first) as i64 }
    }

    #[test]
    fn in_order_duplicate_and_gap() {
        let mut s = ProducerStates::default();
        assert_eq!(s.check(7, 0, 0, 4), SeqCheck::Append);
        s.record(7, 0, b(0, 4, 100));
        assert_eq!(s.check(7, 0, 5, 9), SeqCheck::Append);
        s.record(7, 0, b(5, 9, 105));
        assert_eq!(s.check(7, 0, 0, 4), SeqCheck::Duplicate { base_offset: 100 });
        assert_eq!(s.check(7, 0, 5, 9), SeqCheck::Duplicate { base_offset: 105 });
        assert_eq!(s.check(7, 0, 12, 13), SeqCheck::OutOfOrder { expected: 10 });
    }

    #[test]
    fn window_is_five_batches() {
        let mut s = ProducerStates::default();
        for i in 0..6 {
            s.record(1, 0, b(i, i, i as i64));
        }
        assert_eq!(s.check(1, 0, 0, 0), SeqCheck::OutOfOrder { expected: 6 });
        assert_eq!(s.check(1, 0, 1, 1), SeqCheck::Duplicate { base_offset: 1 });
    }

    #[test]
    fn epochs() {
        let mut s = ProducerStates::default();
        s.record(1, 3, b(0, 0, 0));
        assert_eq!(s.check(1, 2, 1, 1), SeqCheck::FencedEpoch { current: 3 });
        assert_eq!(s.check(1, 4, 5, 5), SeqCheck::OutOfOrder { expected: 0 });
        assert_eq!(s.check(1, 4, 0, 0), SeqCheck::Append);
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut s = ProducerStates::default();
        s.record(1, 0, b(i32::MAX - 1, i32::MAX, 0));
        assert_eq!(s.check(1, 0, 0, 3), SeqCheck::Append);
    }
}
